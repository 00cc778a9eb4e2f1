"""Files named like repo.radeon.com's TransformerEngine for ROCm, with the requirements the real
ones state, for the lock and the CPU image build.

The index publishes TransformerEngine per ROCm release as (ROCm/TransformerEngine README.rst,
"Starting from ROCm 7.0, we provide manylinux wheels", e.g. rocm-rel-7.1.1):
- ``transformer_engine-<v>-py3-none-any.whl``: the Python package; requires pydantic,
  importlib-metadata>=1.0 and packaging (TransformerEngine's setup.py ``install_reqs``);
- ``transformer_engine_rocm-<v>-py3-none-manylinux_2_28_x86_64.whl``: the common library;
- ``transformer_engine_torch-<v>.tar.gz``: the PyTorch extension as a source archive,
  compiled against the installed torch; requires torch (its setup.py, v2.2).

Here the extension's source is a real torch C++ extension (a one-function pybind11 module
built with torch.utils.cpp_extension, as TransformerEngine's is), so the CPU image really
compiles it against its venv's torch without build isolation; the wheels are small stand-ins
that install no ``transformer_engine`` package (Megatron imports one when it finds it, and a
stand-in would pretend TransformerEngine is there).
"""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

from testbed.wheel_index import make_wheel

TE_VERSION = "2.2.0"
TE_REQUIRES = ("pydantic", "importlib-metadata>=1.0", "packaging")
TE_TORCH_REQUIRES = ("torch",)

SETUP_PY = '''\
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(name="transformer_engine_torch", version="{version}", install_requires=["torch"],
      ext_modules=[CppExtension("transformer_engine_torch", ["csrc/extension.cpp"])],
      cmdclass={{"build_ext": BuildExtension}})
'''
EXTENSION_CPP = '''\
#include <torch/extension.h>

torch::Tensor scale(const torch::Tensor& x, double factor) { return x * factor; }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("scale", &scale, "x * factor"); }
'''
PYPROJECT = '''\
[build-system]
requires = ["setuptools>=61", "wheel"]
build-backend = "setuptools.build_meta"
'''


def make_torch_extension_sdist(directory: Path, version: str = TE_VERSION) -> Path:
    """``transformer_engine_torch-<version>.tar.gz`` with PKG-INFO, pyproject.toml, setup.py
    and its C++ source; reproducible bytes."""
    top = f"transformer_engine_torch-{version}"
    pkg_info = "\n".join(["Metadata-Version: 2.1", "Name: transformer_engine_torch",
                          f"Version: {version}",
                          *(f"Requires-Dist: {r}" for r in TE_TORCH_REQUIRES)]) + "\n"
    members = {"PKG-INFO": pkg_info, "pyproject.toml": PYPROJECT,
               "setup.py": SETUP_PY.format(version=version), "csrc/extension.cpp": EXTENSION_CPP}
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{top}.tar.gz"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, text in sorted(members.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mtime, info.mode = len(data), 1735689600, 0o644
            archive.addfile(info, io.BytesIO(data))
    path.write_bytes(gzip.compress(raw.getvalue(), mtime=0))
    return path


def _stand_in(part: str) -> dict[str, bytes]:
    return {f"imagebuild_te_stand_in_{part}/__init__.py":
            b"# a stand-in for a TransformerEngine wheel (testbed/transformer_engine.py)\n"}


def make_transformer_engine(directory: Path, version: str = TE_VERSION) -> dict[str, Path]:
    """The three files of one TransformerEngine release in ``directory``."""
    return {
        "transformer-engine": make_wheel(directory, "transformer_engine", version,
                                         python_tag="py3", abi_tag="none", platform="any",
                                         requires=TE_REQUIRES, files=_stand_in("python")),
        "transformer-engine-rocm": make_wheel(directory, "transformer_engine_rocm", version,
                                              python_tag="py3", abi_tag="none",
                                              platform="manylinux_2_28_x86_64",
                                              files=_stand_in("rocm")),
        "transformer-engine-torch": make_torch_extension_sdist(directory, version),
    }
