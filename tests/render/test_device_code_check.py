"""The device-code diet script of packaged-ROCm images (render/scripts/device-code-check.py),
run as the build runs it, over a ROCm layout of real ELF libraries: gcc-built stand-ins of
librocblas, libhipblaslt and libMIOpen with kernel files named like the real ones beside
them (rocblas/library/TensileLibrary_lazy_<gfx>.dat, Kernels.so-000-<gfx>.hsaco,
hipblaslt/library/extop_<gfx>.co, share/miopen/db/<gfx><CUs>.kdb), and a libtorch_hip that
links them, so the libraries torch loads are found by the real ldd."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.render.layout import DEVICE_CODE_CHECK, SCRIPTS
from tests.support.scripts import staged

SCRIPT = staged(DEVICE_CODE_CHECK, SCRIPTS / DEVICE_CODE_CHECK)
ARCHES = ("gfx90a", "gfx942", "gfx950", "gfx1100")
KERNELS = {
    "lib/rocblas/library": [f"TensileLibrary_lazy_{a}.dat" for a in ARCHES]
    + [f"Kernels.so-000-{a}.hsaco" for a in ARCHES] + ["Kernels.so-000-gfx90a-xnack-.hsaco",
                                                       "TensileManifest.txt",
                                                       "Kernels.so-000-gfx9-4-generic.hsaco"],
    "lib/hipblaslt/library": [f"extop_{a}.co" for a in ARCHES] + ["hipblasltExtOpLibrary.dat"],
    "share/miopen/db": ["gfx90a6e.kdb", "gfx942130.kdb", "gfx942130.db"],
}


def gcc(out: Path, *args: str) -> None:
    source = out.with_suffix(".c")
    source.write_text(f"int {out.name.split('.')[0]}_version(void) {{ return 1; }}\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(source), *args],
                   check=True)


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    rocm = tmp_path / "opt" / "rocm"
    lib = rocm / "lib"
    lib.mkdir(parents=True)
    for soname in ("librocblas.so.4", "libhipblaslt.so.0", "libMIOpen.so.1"):
        gcc(lib / soname, f"-Wl,-soname,{soname}")
    for directory, names in KERNELS.items():
        (rocm / directory).mkdir(parents=True)
        for name in names:
            (rocm / directory / name).write_bytes(name.encode() * 1000)
    torch_lib = tmp_path / "venv" / "torch" / "lib"
    torch_lib.mkdir(parents=True)
    # --no-as-needed: the stand-in calls nothing of them, the real one does.
    gcc(torch_lib / "libtorch_hip.so", "-Wl,--no-as-needed", f"-L{lib}", "-l:librocblas.so.4", "-l:libhipblaslt.so.0",
        "-l:libMIOpen.so.1", f"-Wl,--enable-new-dtags,-rpath,{lib}")
    return {"rocm": rocm, "torch_lib": torch_lib, "report": tmp_path / "report.json"}


def diet(layout: dict[str, Path], targets: str) -> subprocess.CompletedProcess[str]:
    rocm = layout["rocm"]
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--targets", targets, "--torch-lib",
         str(layout["torch_lib"]), "--report", str(layout["report"]),
         *(str(rocm / d) for d in KERNELS), str(rocm / "no-such-dir")],
        capture_output=True, text=True, check=False)


def remaining(layout: dict[str, Path]) -> set[str]:
    return {p.name for p in layout["rocm"].rglob("*") if p.is_file() and ".so" not in p.name
            or p.name.endswith(".hsaco")}


def test_other_architectures_files_go_and_the_targets_stay(layout: dict[str, Path]) -> None:
    before = {p: p.stat().st_size for p in layout["rocm"].rglob("*") if p.is_file()}
    result = diet(layout, "gfx942,gfx90a:xnack-")
    assert result.returncode == 0, result.stderr
    left = remaining(layout)
    assert {"TensileLibrary_lazy_gfx942.dat", "TensileLibrary_lazy_gfx90a.dat",
            "Kernels.so-000-gfx90a-xnack-.hsaco", "extop_gfx942.co", "gfx90a6e.kdb",
            "gfx942130.kdb", "TensileManifest.txt", "hipblasltExtOpLibrary.dat",
            "Kernels.so-000-gfx9-4-generic.hsaco"} <= left
    assert not {name for name in left if "gfx950" in name or "gfx1100" in name}
    report = json.loads(layout["report"].read_text())
    gone = {p: size for p, size in before.items() if not p.exists()}
    assert report["removed_files"] == len(gone) == 6
    assert report["removed_bytes"] == sum(gone.values())
    checked = {Path(entry["library"]).name: entry["files"] for entry in report["checked"]}
    assert set(checked) == {"librocblas.so.4", "libhipblaslt.so.0", "libMIOpen.so.1"}
    assert checked["librocblas.so.4"] == {"gfx942": 2, "gfx90a:xnack-": 3}
    assert "removed 6 files" in result.stdout


def test_a_target_whose_kernels_are_missing_fails_the_build(layout: dict[str, Path]) -> None:
    for name in ("TensileLibrary_lazy_gfx950.dat", "Kernels.so-000-gfx950.hsaco"):
        (layout["rocm"] / "lib/rocblas/library" / name).unlink()
    result = diet(layout, "gfx942,gfx950")
    assert result.returncode == 1
    assert "librocblas.so.4 loads its kernels from" in result.stderr
    assert "which holds none for gfx950 (nor did the base image)" in result.stderr
    # MIOpen without a database for gfx950 compiles at run time: not an error.
    assert "libMIOpen" not in result.stderr


def test_a_library_torch_does_not_load_is_not_required(layout: dict[str, Path]) -> None:
    (layout["torch_lib"] / "libtorch_hip.so").unlink()
    gcc(layout["torch_lib"] / "libtorch_hip.so")
    assert diet(layout, "gfx942").returncode == 0
    assert json.loads(layout["report"].read_text())["checked"] == []
