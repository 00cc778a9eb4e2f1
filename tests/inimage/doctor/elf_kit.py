"""Real ELF shared libraries for the doctor's tests, compiled with gcc: libfabric-like
libraries with FABRIC_1.x symbol versions (the version script and .symver layout of
libfabric's libfabric.map.in), a plugin linked against one of them, and libraries with
chosen DT_NEEDED, SONAME and RUNPATH entries. Nothing is asserted about them here: the
doctor reads them as the dynamic loader would."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

#: libfabric release -> the newest FABRIC_1.x minor it defines (imagebuild.components.network_plugin.libfabric).
LIBFABRIC_ABI = {"1.15": 5, "1.22": 7, "2.1": 8}


def gcc() -> str:
    path = shutil.which("gcc")
    if path is None:
        raise RuntimeError("gcc is needed to build the doctor's test libraries "
                           "(apt-get install gcc)")
    return path


def _compile(out: Path, source: str, *flags: str) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    c_file = out.with_name(out.name + ".c")
    c_file.write_text(source)
    subprocess.run([gcc(), "-shared", "-fPIC", "-o", str(out), str(c_file), *flags],
                   check=True, capture_output=True, text=True)
    c_file.unlink()
    return out


def build_libfabric(out: Path, release: str) -> Path:
    """libfabric.so.1 defining FABRIC_1.0 .. FABRIC_1.<n> with fi_getinfo's default at
    the newest, as libfabric's own build does."""
    newest = LIBFABRIC_ABI[release]
    nodes, source = [], []
    for minor in range(newest + 1):
        parent = f" FABRIC_1.{minor - 1}" if minor else ""
        nodes.append(f"FABRIC_1.{minor} {{ global: fi_tag_1_{minor}; "
                     f"{'local: *; ' if not minor else ''}}}{parent};")
        source.append(f"int fi_tag_1_{minor}(void) {{ return {minor}; }}")
    # fi_getinfo at every ABI version, the newest the default: libfabric keeps the old
    # entry points (compatibility symbols) when a structure changes.
    for minor in range(newest + 1):
        default = "@" if minor == newest else ""
        source += [f"int fi_getinfo_1_{minor}(void) {{ return {minor}; }}",
                   f'asm(".symver fi_getinfo_1_{minor},fi_getinfo@{default}FABRIC_1.{minor}");']
    script = out.with_name("libfabric.map")
    out.parent.mkdir(parents=True, exist_ok=True)
    script.write_text("\n".join(nodes) + "\n")
    try:
        return _compile(out, "\n".join(source) + "\n", "-Wl,-soname,libfabric.so.1",
                        f"-Wl,--version-script={script}")
    finally:
        script.unlink()


def build_plugin(out: Path, libfabric: Path, needed: tuple[str, ...] = (),
                 exports: tuple[str, ...] = ()) -> Path:
    """A net plugin calling fi_getinfo, linked against ``libfabric`` (it needs that
    library's default fi_getinfo version), exporting ncclNetPlugin_v8 and ``exports`` (e.g.
    ncclTunerPlugin_v3, as aws-ofi-nccl built for AWS carries its tuner); ``needed``: more
    DT_NEEDED entries (stubs link them)."""
    stubs = _stubs(out.parent / ".stubs-plugin", needed)
    extra = "".join(f"int {name} = 1;\n" for name in exports)
    try:
        return _compile(out, "extern int fi_getinfo(void);\nint ncclNetPlugin_v8 = 8;\n"
                        f"{extra}int plugin_init(void) {{ return fi_getinfo(); }}\n",
                        "-Wl,--no-as-needed", f"-L{libfabric.parent}", "-l:libfabric.so.1",
                        f"-L{stubs}", *[f"-l:{name}" for name in needed])
    finally:
        shutil.rmtree(stubs, ignore_errors=True)


def _stubs(directory: Path, names: list[str] | tuple[str, ...]) -> Path:
    for name in names:
        _compile(directory / name, "int stub_symbol(void) { return 0; }\n", f"-Wl,-soname,{name}")
    return directory


def build_library(out: Path, soname: str, needed: list[str], runpath: str | None = None
                  ) -> Path:
    """A library named ``soname`` whose DT_NEEDED lists ``needed`` (stubs link it)."""
    stubs = _stubs(out.parent / f".stubs-{soname}", needed)
    flags = [f"-Wl,-soname,{soname}", "-Wl,--no-as-needed", f"-L{stubs}",
             *[f"-l:{name}" for name in needed]]
    if runpath:
        flags.append(f"-Wl,-rpath,{runpath},--enable-new-dtags")
    try:
        return _compile(out, f"int lib_{abs(hash(soname))}(void) {{ return 1; }}\n", *flags)
    finally:
        shutil.rmtree(stubs, ignore_errors=True)
