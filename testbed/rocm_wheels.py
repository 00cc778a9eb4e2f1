"""Fixture wheel sets shaped like repo.radeon.com's ROCm wheels, with the dependency metadata
those wheels carry, and a PEP 503-shaped "PyPI" holding what their requirements pull.

The wheels are small (``testbed.wheel_index.make_wheel``), but their METADATA says what the
real ones say, so locking them exercises the same checks and the same resolution:

- torch requires its own Triton build exactly, on Linux x86_64 only
  (``triton==3.4.0+rocm7.0.2.gitf9e5bf54; platform_system == "Linux" and ...``; the
  project is ``pytorch-triton-rocm`` up to ROCm 6.4 and ``triton`` from 7.0), plus the
  PyPI projects every torch wheel requires (the list in pytorch's setup.py), with markers
  and extras that must not apply to the image;
- torchvision and torchaudio require the torch build they were compiled against
  (``torch==<torch's full version, local label included>``); torchvision also numpy and
  Pillow.

    pins = {"torch": "2.8.0+rocm7.0.2.lw.git245bf6ed", "triton": "3.4.0+rocm7.0.2.gitf9e5bf54"}
    make_rocm_wheels(root / "rocm-rel-7.0.2", pins)
    make_pypi_index(root / "simple", pypi_requirements(pins))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from testbed.wheel_index import make_wheel

#: The marker torch puts on its Triton requirement: Triton wheels exist for Linux x86_64 only.
LINUX_X86_64 = 'platform_system == "Linux" and platform_machine == "x86_64"'

#: What every torch 2.8/2.9 wheel requires from PyPI (pytorch's setup.py), extras included:
#: an extra or a marker that does not hold in the image must not pull anything.
TORCH_REQUIRES = (
    "filelock",
    "typing-extensions>=4.10.0",
    'setuptools; python_version >= "3.12"',
    "sympy>=1.13.3",
    "networkx>=2.5.1",
    "jinja2",
    "fsspec>=0.8.5",
    'optree>=0.13.0; extra == "optree"',
    'opt-einsum>=3.3; extra == "opt-einsum"',
    'pyyaml; extra == "pyyaml"',
)
#: Triton's own requirements: none that applies to Python 3.12 without extras.
TRITON_REQUIRES = (
    'importlib-metadata; python_version < "3.10"',
    'lit; extra == "build"',
)
TORCHVISION_REQUIRES = ("numpy", "pillow!=8.3.*,>=5.3.0", 'scipy; extra == "scipy"')
TRITON_PROJECTS = ("triton", "pytorch-triton-rocm")

#: The fixture PyPI: project -> (version, requirements). Realistic names and versions;
#: the wheels are pure-Python stand-ins.
PYPI_PROJECTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "filelock": ("3.20.0", ()),
    "fsspec": ("2025.9.0", ()),
    "jinja2": ("3.1.6", ("MarkupSafe>=2.0",)),
    "markupsafe": ("3.0.3", ()),
    "mpmath": ("1.3.0", ()),
    "networkx": ("3.5", ()),
    "numpy": ("2.3.3", ()),
    "pillow": ("11.3.0", ()),
    "pyyaml": ("6.0.3", ()),
    # Below 80: the TransformerEngine source build bounds it (setuptools<80).
    "setuptools": ("79.0.1", ()),
    "sympy": ("1.14.0", ("mpmath<1.4,>=1.1.0",)),
    "tqdm": ("4.67.1", ()),
    "typing-extensions": ("4.16.0", ()),
    # What Megatron-LM imports (the recipes' megatron.pypi), with tiktoken's requirements.
    "certifi": ("2026.10.19.post1", ()),
    "charset-normalizer": ("3.5.3", ()),
    "einops": ("0.8.2", ()),
    "idna": ("3.20", ('ruff>=0.16.0; extra == "all"',)),
    "packaging": ("26.4", ()),
    "pybind11": ("3.1.0", ('pybind11-global==3.1.0; extra == "global"',)),
    "regex": ("2026.11.19", ()),
    "requests": ("2.34.2", ("charset_normalizer<4,>=2", "idna<4,>=2.5", "urllib3<3,>=1.26",
                            "certifi>=2023.5.7", 'PySocks!=1.5.7,>=1.5.6; extra == "socks"')),
    "sentencepiece": ("0.2.3", ('numpy; extra == "numpy"', 'protobuf; extra == "protobuf"')),
    "six": ("1.17.0", ()),
    "tiktoken": ("0.14.0", ("regex", "requests", 'blobfile>=3; extra == "blobfile"')),
    "urllib3": ("2.8.0", ('h2<5,>=4; extra == "h2"',)),
    # What TransformerEngine's Python package requires (testbed.transformer_engine), and the
    # build requirements of its PyTorch extension's source archive.
    "annotated-types": ("0.8.0", ()),
    "importlib-metadata": ("10.2.0", ("zipp>=3.20",)),
    "pydantic": ("2.14.4", ("annotated-types>=0.6.0", "pydantic-core==2.50.2",
                            "typing-extensions>=4.16.0", "typing-inspection>=0.4.4")),
    "pydantic-core": ("2.50.2", ("typing-extensions>=4.16.0",)),
    "typing-inspection": ("0.4.5", ("typing-extensions>=4.15.0",)),
    "wheel": ("0.48.0", ("packaging>=24.0",)),
    "zipp": ("4.1.2", ()),
}

#: Marker variables of the images' Python (3.12 on linux x86_64), for the fixture PyPI.
_IMAGE_ENVIRONMENT = {
    "implementation_name": "cpython", "implementation_version": "3.12.0", "os_name": "posix",
    "platform_machine": "x86_64", "platform_python_implementation": "CPython",
    "platform_release": "", "platform_system": "Linux", "platform_version": "",
    "python_full_version": "3.12.0", "python_version": "3.12", "sys_platform": "linux",
    "extra": "",
}


def rocm_requires(name: str, pins: Mapping[str, str]) -> list[str]:
    """``Requires-Dist`` of the ROCm wheel ``name`` in a set built together (``pins``:
    project -> version), as the real wheel states it."""
    project = canonicalize_name(name)
    if project == "torch":
        triton = [f"{t}=={pins[t]}; {LINUX_X86_64}" for t in TRITON_PROJECTS if t in pins]
        return [*TORCH_REQUIRES, *triton]
    if project in ("torchvision", "torchaudio"):
        extra = TORCHVISION_REQUIRES if project == "torchvision" else ()
        return [f"torch=={pins['torch']}", *extra]
    if project in TRITON_PROJECTS:
        return list(TRITON_REQUIRES)
    return []


def make_rocm_wheels(directory: Path | str, pins: Mapping[str, str], *,
                     python_tag: str = "cp312",
                     requires: Mapping[str, Sequence[str]] | None = None) -> dict[str, Path]:
    """One wheel per pin in ``directory`` (a release directory), each with the METADATA of
    ``rocm_requires``; ``requires`` replaces a project's requirements (a wheel built for
    another set). Returns project -> wheel path."""
    overrides = {canonicalize_name(k): list(v) for k, v in (requires or {}).items()}
    made = {}
    for name, version in pins.items():
        project = canonicalize_name(name)
        wanted = overrides[project] if project in overrides else rocm_requires(project, pins)
        made[project] = make_wheel(directory, project, version, python_tag=python_tag,
                                   requires=wanted, requires_python=">=3.9.0")
    return made


def pypi_requirements(pins: Mapping[str, str]) -> list[str]:
    """What the set's wheels require from elsewhere than the set itself."""
    pinned = {canonicalize_name(n) for n in pins}
    wanted = []
    for name in pins:
        for line in rocm_requires(name, pins):
            if canonicalize_name(Requirement(line).name) not in pinned:
                wanted.append(line)
    return wanted


def make_pypi_index(simple: Path | str, requirements: Iterable[str]) -> list[Path]:
    """``simple/<project>/`` with a py3-none-any wheel of every project ``requirements`` pull
    in the image (transitively; markers evaluated for Python 3.12 on linux x86_64)."""
    simple = Path(simple)
    made: dict[str, Path] = {}
    queue = list(requirements)
    while queue:
        requirement = Requirement(queue.pop())
        if requirement.marker is not None and not requirement.marker.evaluate(
                _IMAGE_ENVIRONMENT):
            continue
        project = canonicalize_name(requirement.name)
        if project in made:
            continue
        if project not in PYPI_PROJECTS:
            raise KeyError(f"{project}: not in testbed.rocm_wheels.PYPI_PROJECTS; add it "
                           "(version and requirements) to serve it")
        version, needs = PYPI_PROJECTS[project]
        made[project] = make_wheel(simple / project, project, version, python_tag="py3",
                                   abi_tag="none", platform="any", requires=needs)
        queue.extend(needs)
    return sorted(made.values())

