"""A source tree of ROCm/TransformerEngine's layout and build flow, served by the test's git
mirror as ``ROCm/TransformerEngine.git``, for the CPU image's build of the source route.

TransformerEngine's source build (ROCm/TransformerEngine README, "pip install ." with
NVTE_FRAMEWORK=pytorch) is one setup.py that builds the framework-agnostic common library
``transformer_engine/common`` with CMake (its CMakeLists.txt; Ninja when found) and then the
PyTorch extension ``transformer_engine_torch`` with torch.utils.cpp_extension against the
installed torch, linking the common library; its version is ``build_tools/VERSION.txt``
plus ``+<short commit>`` in a git checkout; third-party code comes in as git submodules under
``3rdparty/``. This tree has the same layout and flow, with a few lines of C++ of its own (not
TransformerEngine's code): the common library exports one function, the extension calls it
on a tensor, and the common library includes a header from a submodule, so a checkout
without its submodules does not build. The submodule's URL is relative (``../``), so it is
fetched from the same mirror as the repository.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

TE_SOURCE_VERSION = "2.4.0.dev0"
#: The branch the tree's one commit is on: the shipped recipes' ref.
TE_SOURCE_REF = "release_v2.4_rocm"
SUBMODULE = "3rdparty/te-fixture-scale"

SETUP_PY = '''\
"""A TransformerEngine-shaped build (testbed/transformer_engine_source.py)."""
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = Path(__file__).resolve().parent
COMMON_BUILD = ROOT / "build" / "common"
version = (ROOT / "build_tools" / "VERSION.txt").read_text().strip()
commit = subprocess.run(["git", "rev-parse", "--short=8", "HEAD"], cwd=ROOT, text=True,
                        capture_output=True, check=False).stdout.strip()
if commit:
    version += "+" + commit
if os.environ.get("NVTE_FRAMEWORK", "pytorch") != "pytorch":
    raise SystemExit("this tree builds the pytorch framework only")


class CommonThenTorch(BuildExtension):
    """CMake builds the common library, then torch builds the extension that links it."""

    def run(self):
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.run(["cmake", "-S", str(ROOT / "transformer_engine" / "common"), "-B",
                        str(COMMON_BUILD), "-DCMAKE_BUILD_TYPE=Release", *generator], check=True)
        subprocess.run(["cmake", "--build", str(COMMON_BUILD)], check=True)
        package = Path(self.build_lib) / "transformer_engine"
        package.mkdir(parents=True, exist_ok=True)
        shutil.copy2(COMMON_BUILD / "libtransformer_engine.so", package)
        super().run()


setup(
    name="transformer_engine",
    version=version,
    packages=["transformer_engine"],
    install_requires=["pydantic", "importlib-metadata>=1.0", "packaging"],
    ext_modules=[CppExtension(
        "transformer_engine_torch", ["transformer_engine/pytorch/csrc/extension.cpp"],
        include_dirs=[str(ROOT / "transformer_engine" / "common" / "include")],
        library_dirs=[str(COMMON_BUILD)], libraries=["transformer_engine"],
        extra_link_args=["-Wl,-rpath,$ORIGIN/transformer_engine"])],
    cmdclass={"build_ext": CommonThenTorch},
)
'''
FILES = {
    "build_tools/VERSION.txt": TE_SOURCE_VERSION + "\n",
    "setup.py": SETUP_PY,
    "transformer_engine/__init__.py": (
        '"""Loads the common library first, as TransformerEngine does."""\n'
        "import ctypes\nimport os\n\n"
        "_common = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "
        "'libtransformer_engine.so'), mode=ctypes.RTLD_GLOBAL)\n"),
    "transformer_engine/common/CMakeLists.txt": (
        "cmake_minimum_required(VERSION 3.18)\nproject(transformer_engine LANGUAGES CXX)\n"
        "add_library(transformer_engine SHARED common.cpp)\n"
        "target_include_directories(transformer_engine PRIVATE include "
        "${CMAKE_CURRENT_SOURCE_DIR}/../../" + SUBMODULE + ")\n"),
    "transformer_engine/common/include/transformer_engine/scale.h": (
        '#pragma once\nextern "C" double nvte_fixture_factor();\n'),
    "transformer_engine/common/common.cpp": (
        '#include "transformer_engine/scale.h"\n#include "fixture_scale.h"\n\n'
        'extern "C" double nvte_fixture_factor() { return FIXTURE_SCALE; }\n'),
    "transformer_engine/pytorch/csrc/extension.cpp": (
        "#include <torch/extension.h>\n#include \"transformer_engine/scale.h\"\n\n"
        "torch::Tensor scale(const torch::Tensor& x) { return x * nvte_fixture_factor(); }\n\n"
        'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("scale", &scale); }\n'),
}
SUBMODULE_FILES = {"fixture_scale.h": "#pragma once\n#define FIXTURE_SCALE 3.0\n"}
_ENV = {"GIT_AUTHOR_NAME": "imagebuild testbed", "GIT_AUTHOR_EMAIL": "testbed@invalid",
        "GIT_COMMITTER_NAME": "imagebuild testbed", "GIT_COMMITTER_EMAIL": "testbed@invalid",
        "GIT_AUTHOR_DATE": "2025-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2025-01-01T00:00:00Z",
        # the submodule is added from a local path
        "GIT_ALLOW_PROTOCOL": "file:git:https"}


def _git(tree: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True,
                          text=True, env={**os.environ, **_ENV})
    return done.stdout.strip()


def _commit_tree(tree: Path, files: dict[str, str], branch: str) -> None:
    for name, text in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    _git(tree, "init", "-q", "-b", branch)
    _git(tree, "add", "-A")


def _publish(tree: Path, bare: Path) -> None:
    subprocess.run(["git", "clone", "-q", "--bare", str(tree), str(bare)], check=True)
    for key in ("uploadpack.allowAnySHA1InWant", "uploadpack.allowFilter"):
        _git(bare, "config", key, "true")


def serve_transformer_engine_source(git_root: Path, work: Path) -> dict[str, str]:
    """``<git_root>/ROCm/TransformerEngine.git`` (one commit on ``TE_SOURCE_REF``) and its
    submodule ``<git_root>/ROCm/te-fixture-scale.git``; returns both commits."""
    sub_tree = work / "te-fixture-scale"
    _commit_tree(sub_tree, SUBMODULE_FILES, "main")
    _git(sub_tree, "commit", "-q", "-m", "the submodule of the TransformerEngine-shaped tree")
    sub_bare = git_root / "ROCm" / "te-fixture-scale.git"
    _publish(sub_tree, sub_bare)
    tree = work / "TransformerEngine"
    _commit_tree(tree, FILES, TE_SOURCE_REF)
    _git(tree, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub_bare),
         SUBMODULE)
    # As the mirror serves it: next to the repository, whatever the mirror's address.
    _git(tree, "config", "-f", ".gitmodules", f"submodule.{SUBMODULE}.url",
         "../te-fixture-scale.git")
    _git(tree, "add", "-A")
    _git(tree, "commit", "-q", "-m", "a TransformerEngine-shaped tree (imagebuild testbed)")
    _publish(tree, git_root / "ROCm" / "TransformerEngine.git")
    return {"commit": _git(tree, "rev-parse", "HEAD"),
            "submodule": _git(sub_tree, "rev-parse", "HEAD")}
