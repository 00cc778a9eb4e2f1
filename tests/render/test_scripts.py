"""The helper scripts the build context carries, run for real outside an image.

fetch-uv.py runs in the python stage with the base image's Python; it is tested here against
a real HTTP server. The hipBLASLt scripts have their own tests (test_hipblaslt_*.py).
"""

from __future__ import annotations

import hashlib
import io
import platform
import re
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

from imagebuild.render.layout import SCRIPTS, UV_WHEELS
from tests.support.indexserver import Fault
from tests.support.scripts import staged

FETCH_UV = staged("fetch-uv.py", SCRIPTS / "fetch-uv.py")


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
