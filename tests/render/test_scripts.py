"""The helper scripts the build context carries, run for real outside an image.

fetch-uv.py runs in the python stage with the base image's Python; hipblaslt-tuning-kit.sh
runs in the hipblaslt stage after the build. Both are tested here against a real HTTP
server and a fake hipBLASLt build tree laid out like install.sh leaves it.
"""

from __future__ import annotations

import hashlib
import io
import os
import platform
import re
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from imagebuild.render.layout import UV_WHEELS
from tests.support.indexserver import Fault

TEMPLATES = Path(__file__).resolve().parents[2] / "imagebuild" / "render" / "templates"
FETCH_UV = TEMPLATES / "fetch-uv.py"
TUNING_KIT = TEMPLATES / "hipblaslt-tuning-kit.sh"


# --- fetch-uv.py ----------------------------------------------------------------------------

def fake_uv_wheel(directory: Path) -> tuple[Path, str]:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        wheel.writestr("uv-0.0.1.data/scripts/uv", "#!/bin/sh\necho fake uv\n")
        wheel.writestr("uv-0.0.1.dist-info/METADATA", "Name: uv\nVersion: 0.0.1\n")
    path = directory / "uv-0.0.1-py3-none-manylinux_2_17_x86_64.whl"
    path.write_bytes(buffer.getvalue())
    return path, hashlib.sha256(buffer.getvalue()).hexdigest()


def fetch(dest: Path, *pins: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(FETCH_UV), str(dest), *pins], check=False,
                          capture_output=True, text=True, timeout=60)


def test_fetch_uv_installs_the_pinned_binary(tmp_path: Path, index_server):
    wheel, sha = fake_uv_wheel(index_server.directory)
    dest = tmp_path / "uv"
    result = fetch(dest, "other-arch", "http://127.0.0.1:9/none", "0" * 64,
                   platform.machine(), index_server.url_for(wheel.name), sha)
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(dest.stat().st_mode) == 0o755
    assert subprocess.run([str(dest)], capture_output=True, text=True,
                          check=True).stdout == "fake uv\n"
    assert index_server.count() == 1


def test_fetch_uv_refuses_other_bytes(tmp_path: Path, index_server):
    wheel, sha = fake_uv_wheel(index_server.directory)
    index_server.inject(wheel.name, Fault("corrupt"))
    result = fetch(tmp_path / "uv", platform.machine(), index_server.url_for(wheel.name), sha)
    assert result.returncode == 1
    assert f"sha256 mismatch for {index_server.url_for(wheel.name)}: expected {sha}" in \
        result.stderr
    assert not (tmp_path / "uv").exists() and not (tmp_path / "uv.tmp").exists()


def test_fetch_uv_retries_a_failing_server(tmp_path: Path, index_server):
    wheel, sha = fake_uv_wheel(index_server.directory)
    index_server.inject(wheel.name, Fault.http_status(503))
    result = fetch(tmp_path / "uv", platform.machine(), index_server.url_for(wheel.name), sha)
    assert result.returncode == 0, result.stderr
    assert index_server.count(wheel.name) == 2


def test_fetch_uv_names_the_missing_architecture(tmp_path: Path):
    result = fetch(tmp_path / "uv", "riscv-never", "http://127.0.0.1:9/x", "0" * 64)
    assert result.returncode == 1
    assert f"no uv wheel pinned for {platform.machine()} (pinned: riscv-never)" in result.stderr


def test_uv_pins_are_well_formed():
    assert {arch for arch, _, _ in UV_WHEELS} == {"x86_64", "aarch64"}
    for arch, url, sha in UV_WHEELS:
        assert re.fullmatch(r"[0-9a-f]{64}", sha)
        assert url.startswith("https://files.pythonhosted.org/packages/")
        assert url.endswith(".whl") and arch in url


# --- hipblaslt-tuning-kit.sh ----------------------------------------------------------------

LOGIC = "library/src/amd_detail/rocblaslt/src/Tensile/Logic/asm_full/gfx942"


def fake_build_tree(root: Path, absolute: bool = True) -> Path:
    """What install.sh -c leaves: sources, build/release with clients and the match table."""
    src = root / "src" / "projects" / "hipblaslt"
    (src / "utilities").mkdir(parents=True)
    (src / "utilities" / "find_exact.py").write_text("# find_exact\n")
    bench = src / "build" / "release" / "clients" / "staging" / "hipblaslt-bench"
    bench.parent.mkdir(parents=True)
    bench.write_text("#!/bin/sh\n")
    bench.chmod(0o755)
    (src / LOGIC).mkdir(parents=True)
    for name in ("a.yaml", "b.yaml", "unused.yaml"):
        (src / LOGIC / name).write_text(f"- {name}\n")
    (src / "build" / "release" / "device-library").mkdir(parents=True)
    prefix = f"{src}/" if absolute else "../../"
    table = "\n".join(f"- [{prefix}{LOGIC}/{name}, {i}]"
                      for i, name in enumerate(["a.yaml", "b.yaml", "a.yaml"]))
    (src / "build" / "release" / "device-library" / "MatchTable.yaml").write_text(table + "\n")
    return src


def kit(src: Path, prefix: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(TUNING_KIT), str(src), str(prefix)], check=False,
                          capture_output=True, text=True, timeout=60)


def test_tuning_kit_keeps_exactly_what_find_exact_reads(tmp_path: Path):
    src = fake_build_tree(tmp_path)
    prefix = tmp_path / "opt" / "hipblaslt"
    result = kit(src, prefix)
    assert result.returncode == 0, result.stderr
    root = prefix / "tuning"
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == sorted([
        "utilities/find_exact.py",
        "build/release/clients/hipblaslt-bench",
        "build/release/device-library/MatchTable.yaml",
        f"src/{LOGIC}/a.yaml",
        f"src/{LOGIC}/b.yaml",
    ])
    assert os.access(root / "build/release/clients/hipblaslt-bench", os.X_OK)
    # The table now points into the kit, and everything it names exists there.
    table = (root / "build/release/device-library/MatchTable.yaml").read_text()
    assert str(src) not in table
    named = re.findall(r"(/\S+\.yaml)", table)
    assert len(named) == 3 and all(Path(n).is_file() for n in named)
    assert "kept hipblaslt-bench, find_exact.py, MatchTable.yaml and 2 logic YAML" in \
        result.stdout


def test_tuning_kit_links_an_installed_bench(tmp_path: Path):
    src = fake_build_tree(tmp_path)
    prefix = tmp_path / "opt" / "hipblaslt"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "hipblaslt-bench").write_text("#!/bin/sh\n")
    (prefix / "bin" / "hipblaslt-bench").chmod(0o755)
    assert kit(src, prefix).returncode == 0
    link = prefix / "tuning" / "build/release/clients/hipblaslt-bench"
    assert link.is_symlink() and os.readlink(link) == str(prefix / "bin" / "hipblaslt-bench")


def test_tuning_kit_keeps_relative_names_relative(tmp_path: Path):
    src = fake_build_tree(tmp_path, absolute=False)
    prefix = tmp_path / "opt" / "hipblaslt"
    result = kit(src, prefix)
    assert result.returncode == 0, result.stderr
    build = prefix / "tuning" / "build" / "release"
    for name in ("a.yaml", "b.yaml"):
        assert (build / ".." / ".." / LOGIC / name).resolve().is_file()


@pytest.mark.parametrize(("breakage", "message"), [
    ("missing-logic", "MatchTable.yaml names"),
    ("no-table", "no MatchTable.yaml under"),
    ("no-bench", "no hipblaslt-bench under"),
    ("no-utility", "no utilities/find_exact.py"),
])
def test_tuning_kit_fails_loudly_on_an_incomplete_tree(tmp_path: Path, breakage: str,
                                                        message: str):
    src = fake_build_tree(tmp_path)
    release = src / "build" / "release"
    {"missing-logic": lambda: (src / LOGIC / "b.yaml").unlink(),
     "no-table": lambda: (release / "device-library" / "MatchTable.yaml").unlink(),
     "no-bench": lambda: (release / "clients" / "staging" / "hipblaslt-bench").unlink(),
     "no-utility": lambda: (src / "utilities" / "find_exact.py").unlink()}[breakage]()
    result = kit(src, tmp_path / "opt" / "hipblaslt")
    assert result.returncode == 1
    assert message in result.stderr
