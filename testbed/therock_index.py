"""A local PEP 503 index shaped like AMD's TheRock ROCm wheel indexes, for tests.

TheRock publishes ROCm itself as Python packages, one complete index per GPU family
(https://github.com/ROCm/TheRock/blob/main/RELEASES.md; docs/packaging/python_packaging.md):

- ``rocm``: a pure-Python *sdist*, the "selector": its build decides its dependencies,
  ``rocm-sdk-core==V`` always and, for the extra ``libraries``,
  ``rocm-sdk-libraries-<family>==V``, the family taken from ``ROCM_SDK_TARGET_FAMILY`` or
  the default of the index it came from. It provides the ``rocm_sdk`` module
  (``initialize_process``, ``find_libraries``) and the ``rocm-sdk`` tool;
- ``rocm-sdk-core``: the HIP runtime and tools, in site-packages/_rocm_sdk_core/;
- ``rocm-sdk-libraries-<family>``: math libraries and RCCL with device code for the family,
  in site-packages/_rocm_sdk_libraries_<family>/, linked to the core by relative RPATHs;
- ``torch``: requires ``rocm[libraries]==V`` and preloads the SDK's libraries through
  ``rocm_sdk.initialize_process`` when imported.

Here every file is real of its kind: the sdist builds with its own PEP 517 backend (stdlib
only, so no setuptools is needed to build it), the wheels carry METADATA, WHEEL and RECORD,
and the shared objects are compiled by gcc (stand-ins exporting one function each, with the
real sonames and RUNPATHs). ``IndexServer(root, publish_hashes=True)`` serves ``root`` as
``/<family>/<project>/`` pages with ``#sha256=`` links, as a PEP 503 index does.

``make_multi_arch_index`` lays out the 7.14 and 10.x lines' one index for every GPU
(https://repo.amd.com/rocm/whl-multi-arch/, https://stable.repo.amd.com/rocm/whl-next/):
host and device code in separate projects, the device code selected by extras. ``torch``
provides ``device-<target>`` extras requiring ``amd-torch-device-<target>==<torch>`` and
``rocm[device-<target>]==V``; the selector's ``device-<target>`` extra requires
``rocm-sdk-device-<target>==V`` and ``libraries`` the arch-neutral ``rocm-sdk-libraries``
(AMD's install pages pin exactly these projects, e.g. ``amd-torch-device-gfx942==
2.12.0+rocm7.14.0`` and ``rocm-sdk-device-gfx942==7.14.0``; the selector's extras:
ROCm/TheRock build_tools/packaging/python ``build_per_target_extras``).
"""

from __future__ import annotations

import gzip
import io
import subprocess
import tarfile
import tempfile
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from testbed.rocm_wheels import rocm_requires
from testbed.wheel_index import make_wheel

#: family index -> the targets it serves (RELEASES.md, "Index page listing").
FAMILIES: dict[str, tuple[str, ...]] = {"gfx94X-dcgpu": ("gfx942",),
                                        "gfx950-dcgpu": ("gfx950",)}
PRELOADED = ("amdhip64", "rccl", "hipblaslt")

HIP_C = "int hipRuntimeGetVersion(int *version) { *version = 100000; return 0; }\n"
USER_C = ("extern int hipRuntimeGetVersion(int *);\n"
          "int {function}(int *version) {{ return hipRuntimeGetVersion(version); }}\n")


@dataclass(frozen=True)
class RocmSdkIndex:
    """``root/<family>/<project>/<file>``: one PEP 503 simple index per family."""

    root: Path
    version: str
    torch_version: str
    families: tuple[str, ...]

    def index_dir(self, family: str) -> Path:
        return self.root / family


def make_rocm_sdk_index(root: Path | str, *, version: str = "10.0.0",
                        torch_version: str = "2.9.1+rocm10.0.0",
                        families: tuple[str, ...] = tuple(FAMILIES),
                        python_tag: str = "cp311") -> RocmSdkIndex:
    root = Path(root)
    with tempfile.TemporaryDirectory(prefix="therock-libs-") as tmp:
        libs = _compile(Path(tmp))
        for family in families:
            index = root / family
            package = f"_rocm_sdk_libraries_{family.replace('-', '_')}"
            _sdist(index / "rocm", version, family)
            make_wheel(index / "rocm-sdk-core", "rocm-sdk-core", version, "py3", files={
                "_rocm_sdk_core/__init__.py": b"",
                "_rocm_sdk_core/lib/libamdhip64.so.7": libs["libamdhip64.so.7"]})
            make_wheel(index / canonicalize_name(f"rocm-sdk-libraries-{family}"),
                       f"rocm-sdk-libraries-{family}", version, "py3", files={
                           f"{package}/__init__.py": b"",
                           f"{package}/lib/librccl.so.1": libs["librccl.so.1"],
                           f"{package}/lib/libhipblaslt.so.1": libs["libhipblaslt.so.1"]})
            make_wheel(index / "torch", "torch", torch_version, python_tag,
                       requires=[f"rocm[libraries]=={version}"],
                       files={"torch/__init__.py": _torch_init(torch_version, version).encode()})
    return RocmSdkIndex(root, version, torch_version, tuple(families))


@dataclass(frozen=True)
class MultiArchIndex:
    """``root/<name>/<project>/<file>``: one PEP 503 simple index for every target."""

    root: Path
    name: str
    version: str
    torch_version: str
    targets: tuple[str, ...]

    @property
    def index_dir(self) -> Path:
        return self.root / self.name


#: A device pack's stand-in code objects, named like the libraries' per-architecture files
#: (rocBLAS/hipBLASLt TensileLibrary_*_<gfx>.co and .dat files).
def device_files(package: str, target: str) -> dict[str, bytes]:
    return {f"{package}/lib/{library}/library/TensileLibrary_lazy_{target}.dat":
            f"{library} kernels for {target}\n".encode()
            for library in ("rocblas", "hipblaslt")}


def make_multi_arch_index(root: Path | str, *, name: str = "whl-next",
                          version: str = "10.1.0", torch_version: str = "2.14.0+rocm10.1.0",
                          targets: tuple[str, ...] = ("gfx90a", "gfx942", "gfx950"),
                          python_tag: str = "cp312",
                          pins: Mapping[str, str] | None = None,
                          python_tags: tuple[str, ...] = ()) -> MultiArchIndex:
    """``pins`` (project -> version, torch's included): a whole release's set, each wheel
    with the Requires-Dist the real ones state (testbed.rocm_wheels.rocm_requires);
    torchvision, like torch, with a device extra and pack per target. ``python_tags``: the
    CPythons the release is built for, one wheel of each pinned project per tag (AMD builds
    a release for several: cp311 to cp314); default ``python_tag`` alone."""
    root = Path(root)
    whole_set = pins is not None
    pins = dict(pins or {"torch": torch_version})
    index = root / name
    with tempfile.TemporaryDirectory(prefix="therock-libs-") as tmp:
        libs = _compile(Path(tmp))
    _sdist(index / "rocm", version, None, targets=targets)
    make_wheel(index / "rocm-sdk-core", "rocm-sdk-core", version, "py3", files={
        "_rocm_sdk_core/__init__.py": b"",
        "_rocm_sdk_core/lib/libamdhip64.so.7": libs["libamdhip64.so.7"]})
    make_wheel(index / "rocm-sdk-libraries", "rocm-sdk-libraries", version, "py3", files={
        "_rocm_sdk_libraries/__init__.py": b"",
        "_rocm_sdk_libraries/lib/librccl.so.1": libs["librccl.so.1"],
        "_rocm_sdk_libraries/lib/libhipblaslt.so.1": libs["libhipblaslt.so.1"]})
    for target in targets:
        make_wheel(index / f"rocm-sdk-device-{target}", f"rocm-sdk-device-{target}", version,
                   "py3", files=device_files("_rocm_sdk_libraries", target))
    for project, pinned in pins.items():
        requires = [r for r in rocm_requires(project, pins)
                    if whole_set and not r.startswith("torch==")]
        if project in ("torch", "torchvision"):
            requires += [f"rocm[libraries]=={version}"] if project == "torch" else \
                [f"torch=={pins['torch']}"]
            for target in targets:
                device = f"amd-{project}-device-{target}"
                make_wheel(index / device, device, pinned, "py3",
                           files={f"{project}/.kpack/{project}_{target}.kpack":
                                  f"{target}\n".encode()})
                requires += [f'{device}=={pinned}; extra == "device-{target}"',
                             f'rocm[device-{target}]=={version}; extra == "device-{target}"']
        elif "torch" in pins and project != "triton":
            requires.append(f"torch=={pins['torch']}")
        files = ({"torch/__init__.py": _torch_init(pinned, version).encode()}
                 if project == "torch" else None)
        for tag in python_tags or (python_tag,):
            make_wheel(index / project, project, pinned, tag, requires=requires,
                       provides_extras=[f"device-{t}" for t in targets]
                       if project in ("torch", "torchvision") else (), files=files)
    return MultiArchIndex(root, name, version, pins["torch"], tuple(targets))


def _compile(directory: Path) -> dict[str, bytes]:
    """The stand-in shared objects: libamdhip64, and RCCL and hipBLASLt linking it."""
    def gcc(source: str, soname: str, *extra: str) -> None:
        (directory / f"{soname}.c").write_text(source)
        subprocess.run(["gcc", "-shared", "-fPIC", "-O2", f"-Wl,-soname,{soname}",
                        "-o", str(directory / soname), str(directory / f"{soname}.c"), *extra],
                       check=True)

    gcc(HIP_C, "libamdhip64.so.7")
    # TheRock links across package directories with relative RPATHs; RUNPATH here.
    for soname, function in (("librccl.so.1", "ncclGetVersion"),
                             ("libhipblaslt.so.1", "hipblasLtGetVersion")):
        gcc(USER_C.format(function=function), soname, f"-L{directory}", "-l:libamdhip64.so.7",
            "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../../_rocm_sdk_core/lib")
    return {name: (directory / name).read_bytes()
            for name in ("libamdhip64.so.7", "librccl.so.1", "libhipblaslt.so.1")}


def _torch_init(torch_version: str, version: str) -> str:
    return textwrap.dedent(f"""\
        __version__ = "{torch_version}"
        import rocm_sdk as _rocm_sdk

        _rocm_sdk.initialize_process(preload_shortnames={list(PRELOADED)!r},
                                     check_version="{version}")
        """)


def _sdist(directory: Path, version: str, default_family: str | None,
           targets: tuple[str, ...] = ()) -> Path:
    """``rocm-<V>.tar.gz``: Metadata-Version 2.1 PKG-INFO (no PEP 643 static dependencies, so
    a resolver must build it to learn them) and an in-tree backend that computes them: from
    the family (per-family layout) or, with ``targets`` (multi-arch), one device extra per
    target and the arch-neutral libraries."""
    directory.mkdir(parents=True, exist_ok=True)
    top = f"rocm-{version}"
    files = {
        "PKG-INFO": f"Metadata-Version: 2.1\nName: rocm\nVersion: {version}\n",
        "pyproject.toml": textwrap.dedent("""\
            [build-system]
            requires = []
            build-backend = "selector_backend"
            backend-path = ["_backend"]
            """),
        "_backend/selector_backend.py": _BACKEND.format(
            version=version, family=default_family or "", targets=list(targets)),
        "rocm_sdk/__init__.py": _ROCM_SDK.format(version=version),
        "rocm_sdk/__main__.py": _ROCM_SDK_MAIN.format(families=FAMILIES),
    }
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path in [top, *(f"{top}/{d}" for d in ("_backend", "rocm_sdk"))]:
            info = tarfile.TarInfo(path)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            archive.addfile(info)
        for name, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    target = directory / f"{top}.tar.gz"
    with open(target, "wb") as handle, gzip.GzipFile(fileobj=handle, mode="wb", mtime=0,
                                                     filename="") as packed:
        packed.write(raw.getvalue())
    return target


_BACKEND = '''\
"""PEP 517 backend of the rocm selector: its dependencies depend on the GPU family."""
import base64, hashlib, os, pathlib, zipfile

VERSION = "{version}"
DEFAULT_FAMILY = "{family}"
TARGETS = {targets!r}
DIST_INFO = f"rocm-{{VERSION}}.dist-info"


def _metadata():
    if TARGETS:  # multi-arch: arch-neutral libraries, device code by extra
        libraries = "rocm-sdk-libraries"
        devices = [line for target in TARGETS for line in (
            f"Provides-Extra: device-{{target}}",
            f'Requires-Dist: rocm-sdk-device-{{target}}=={{VERSION}}; extra == "device-{{target}}"')]
    else:
        family = os.environ.get("ROCM_SDK_TARGET_FAMILY") or DEFAULT_FAMILY
        libraries, devices = f"rocm-sdk-libraries-{{family}}", []
    return "\\n".join([
        "Metadata-Version: 2.1", "Name: rocm", f"Version: {{VERSION}}",
        f"Requires-Dist: rocm-sdk-core=={{VERSION}}",
        "Provides-Extra: libraries",
        f'Requires-Dist: {{libraries}}=={{VERSION}}; extra == "libraries"',
        "Provides-Extra: devel",
        f'Requires-Dist: rocm-sdk-devel=={{VERSION}}; extra == "devel"', *devices]) + "\\n"


def _dist_info():
    return {{f"{{DIST_INFO}}/METADATA": _metadata().encode(),
            f"{{DIST_INFO}}/entry_points.txt":
                b"[console_scripts]\\nrocm-sdk = rocm_sdk.__main__:main\\n",
            f"{{DIST_INFO}}/WHEEL":
                b"Wheel-Version: 1.0\\nGenerator: selector_backend\\nRoot-Is-Purelib: true\\n"
                b"Tag: py3-none-any\\n"}}


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    for name, data in _dist_info().items():
        path = pathlib.Path(metadata_directory, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return DIST_INFO


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    members = {{f"rocm_sdk/{{p.name}}": p.read_bytes()
               for p in sorted(pathlib.Path("rocm_sdk").glob("*.py"))}}
    members.update(_dist_info())
    record = []
    for name, data in members.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record.append(f"{{name}},sha256={{digest.decode()}},{{len(data)}}")
    record.append(f"{{DIST_INFO}}/RECORD,,")
    members[f"{{DIST_INFO}}/RECORD"] = ("\\n".join(record) + "\\n").encode()
    filename = f"rocm-{{VERSION}}-py3-none-any.whl"
    with zipfile.ZipFile(pathlib.Path(wheel_directory, filename), "w") as archive:
        for name, data in members.items():
            archive.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), data)
    return filename


def build_sdist(sdist_directory, config_settings=None):
    raise NotImplementedError("this sdist is the distribution")
'''

_ROCM_SDK = '''\
"""The rocm_sdk module of the selector: finds and preloads the SDK wheels' libraries."""
import ctypes
import pathlib

__version__ = "{version}"
_SITE = pathlib.Path(__file__).resolve().parent.parent


def _library_dirs():
    return [_SITE / "_rocm_sdk_core" / "lib", *sorted(_SITE.glob("_rocm_sdk_libraries*/lib"))]


def find_libraries(*shortnames):
    found = []
    for short in shortnames:
        matches = [p for d in _library_dirs() for p in sorted(d.glob(f"lib{{short}}.so*"))]
        if not matches:
            raise ModuleNotFoundError(f"rocm_sdk: no library {{short!r}} in the SDK wheels")
        found.append(matches[0])
    return found


def initialize_process(preload_shortnames=(), check_version=None):
    if check_version is not None and check_version != __version__:
        raise RuntimeError(f"rocm_sdk {{__version__}}, expected {{check_version}}")
    for path in find_libraries(*preload_shortnames):
        ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
'''

_ROCM_SDK_MAIN = '''\
"""rocm-sdk version | targets | path --root"""
import argparse, os

import rocm_sdk

FAMILIES = {families!r}


def main():
    parser = argparse.ArgumentParser(prog="rocm-sdk")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("version")
    sub.add_parser("targets")
    path = sub.add_parser("path")
    path.add_argument("--root", action="store_true", required=True)
    args = parser.parse_args()
    if args.command == "version":
        print(rocm_sdk.__version__)
    elif args.command == "targets":
        devices = sorted(rocm_sdk._SITE.glob("rocm_sdk_device_*.dist-info"))
        if devices:  # multi-arch: the device packs installed
            print(";".join(d.name.split("-")[0].removeprefix("rocm_sdk_device_")
                           for d in devices))
            return
        libraries = sorted(rocm_sdk._SITE.glob("_rocm_sdk_libraries_*"))
        family = libraries[0].name.removeprefix("_rocm_sdk_libraries_").replace("_", "-")
        print(";".join(FAMILIES.get(family, ())))
    else:
        print(rocm_sdk._SITE / "_rocm_sdk_core")


if __name__ == "__main__":
    main()
'''
