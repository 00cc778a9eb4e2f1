"""The test wheels are real wheels: valid RECORD, reproducible, resolvable and installable by uv."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from uv import find_uv_bin

from tests.lock.index.conftest import TORCH, TORCH_OTHER_BUILD
from tests.support.indexserver import IndexServer, make_wheel, sha256_of, wheel_filename


def run_uv(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # --no-index in every call: the index under test is the only source.
    # UV_PYTHON_DOWNLOADS=never: uv would otherwise try to fetch a CPython for
    # --python-version from GitHub first (a 15 s DNS failure here) before using this one.
    env = dict(os.environ, UV_NO_CONFIG="1", UV_CACHE_DIR=str(cwd / "uv-cache"),
               UV_PYTHON_DOWNLOADS="never")
    return subprocess.run([find_uv_bin(), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_wheel_layout_and_record(tmp_path: Path) -> None:
    path = make_wheel(tmp_path, "pytorch-triton-rocm", "3.2.0+rocm6.4.1.git6da9e660",
                      python_tag="cp310", requires=["filelock", "numpy>=1.26"],
                      requires_python=">=3.9")
    assert path.name == "pytorch_triton_rocm-3.2.0+rocm6.4.1.git6da9e660-cp310-cp310-linux_x86_64.whl"
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        distinfo = "pytorch_triton_rocm-3.2.0+rocm6.4.1.git6da9e660.dist-info"
        assert {f"{distinfo}/METADATA", f"{distinfo}/WHEEL", f"{distinfo}/RECORD",
                "pytorch_triton_rocm/__init__.py"} <= set(names)
        metadata = archive.read(f"{distinfo}/METADATA").decode()
        assert "Name: pytorch-triton-rocm\n" in metadata
        assert "Requires-Dist: numpy>=1.26\n" in metadata
        assert "Requires-Python: >=3.9\n" in metadata
        assert "Tag: cp310-cp310-linux_x86_64\n" in archive.read(f"{distinfo}/WHEEL").decode()
        record = archive.read(f"{distinfo}/RECORD").decode().splitlines()
        for line in record:
            name, digest, size = line.rsplit(",", 2)
            if name.endswith("RECORD"):
                assert (digest, size) == ("", "")
                continue
            data = archive.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert digest == f"sha256={expected.decode()}" and int(size) == len(data)
        assert len(record) == len(names)


def test_wheels_are_reproducible(tmp_path: Path) -> None:
    one = make_wheel(tmp_path / "a", "torch", TORCH, payload_size=10_000)
    two = make_wheel(tmp_path / "b", "torch", TORCH, payload_size=10_000)
    other = make_wheel(tmp_path / "c", "torch", TORCH_OTHER_BUILD, payload_size=10_000)
    assert sha256_of(one) == sha256_of(two) != sha256_of(other)


def test_wheel_filename_defaults() -> None:
    assert wheel_filename("Foo.Bar", "1.0") == "foo_bar-1.0-cp312-cp312-linux_x86_64.whl"
    assert wheel_filename("x", "1.0", python_tag="py3", platform="any") == "x-1.0-py3-none-any.whl"


@pytest.mark.integration
def test_uv_resolves_the_exact_build_from_the_http_listing(tmp_path: Path) -> None:
    with IndexServer(tmp_path / "index") as server:
        make_wheel(server.directory, "torch", TORCH,
                   requires=["triton==3.4.0+rocm7.0.2.gitf9e5bf54"])
        make_wheel(server.directory, "torch", TORCH_OTHER_BUILD)
        make_wheel(server.directory, "torch", TORCH, python_tag="cp310")
        make_wheel(server.directory, "triton", "3.4.0+rocm7.0.2.gitf9e5bf54")
        (tmp_path / "requirements.in").write_text(f"torch=={TORCH}\n")

        result = run_uv("pip", "compile", "requirements.in", "--no-index", "--find-links",
                        server.url, "--python-version", "3.12", "--python-platform",
                        "x86_64-manylinux_2_28", "--generate-hashes", "--no-header",
                        cwd=tmp_path)

        assert result.returncode == 0, result.stderr
        torch_hash = sha256_of(server.directory / f"torch-{TORCH}-cp312-cp312-linux_x86_64.whl")
        assert f"torch=={TORCH}" in result.stdout
        assert f"--hash=sha256:{torch_hash}" in result.stdout
        assert "triton==3.4.0+rocm7.0.2.gitf9e5bf54" in result.stdout
        assert server.count("/") >= 1  # uv read the listing over HTTP


@pytest.mark.integration
def test_uv_installs_a_made_wheel(tmp_path: Path) -> None:
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    make_wheel(tmp_path / "wheels", "fakepkg", "1.2.3+local.git0123abcd", python_tag=tag)
    result = run_uv("pip", "install", "--no-index", "--find-links", str(tmp_path / "wheels"),
                    "--target", str(tmp_path / "site"), "--python", sys.executable,
                    "fakepkg==1.2.3+local.git0123abcd", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    check = subprocess.run([sys.executable, "-c", "import fakepkg; print(fakepkg.__version__)"],
                           env=dict(os.environ, PYTHONPATH=str(tmp_path / "site")),
                           capture_output=True, text=True, check=True)
    assert check.stdout.strip() == "1.2.3+local.git0123abcd"
