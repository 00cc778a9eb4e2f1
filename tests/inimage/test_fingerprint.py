"""The fingerprint: the libraries a run loaded (/proc/self/maps), hashed, with where each
came from; `imagebuild report A B` lists what differs."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from imagebuild.inimage.fingerprint import differences, fingerprint, mapped_files, origin
from tests.support.validate import REPO, assert_valid_report

MAPS = """\
7f00-7f01 r--p 00000000 00:2a 1 /opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so
7f01-7f02 r-xp 00001000 00:2a 1 /opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so
7f02-7f03 r--p 00000000 00:2b 2 /opt/cray/libfabric/1.22.0/lib64/libfabric.so.1
7f03-7f04 r--p 00000000 00:2a 3 /usr/lib/x86_64-linux-gnu/libc.so.6
7f04-7f05 rw-p 00000000 00:00 0 [heap]
7f05-7f06 rw-s 00000000 00:05 4 /dev/shm/nccl-x (deleted)
"""
MOUNTINFO = """\
22 1 0:42 / / rw,relatime - overlay overlay rw
23 22 0:43 / /proc rw - proc proc rw
30 22 0:50 /opt/cray /opt/cray ro,relatime - lustre host:/cray ro
"""


def test_mapped_files_are_the_files_of_proc_self_maps_once_each() -> None:
    assert mapped_files(MAPS) == [
        "/opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so",
        "/opt/cray/libfabric/1.22.0/lib64/libfabric.so.1",
        "/usr/lib/x86_64-linux-gnu/libc.so.6"]


def test_a_library_on_a_host_bind_is_from_the_host() -> None:
    mounts = ["/", "/proc", "/opt/cray"]
    assert origin("/opt/cray/libfabric/1.22.0/lib64/libfabric.so.1", mounts, True) == \
        "host (mounted at /opt/cray)"
    assert origin("/opt/venv/lib/libtorch_cuda.so", mounts, True) == "image"
    assert origin("/opt/venv/lib/libtorch_cuda.so", mounts, False) == "this environment"
    found = fingerprint(MAPS, MOUNTINFO, container=True)
    assert [(f["name"], f["origin"]) for f in found["files"]] == [
        ("libtorch_cuda.so", "image"), ("libfabric.so.1", "host (mounted at /opt/cray)")]


def test_this_process_fingerprint_hashes_the_torch_it_loaded() -> None:
    found = fingerprint()
    files = {f["name"]: f for f in found["files"]}
    lib = Path(torch.__file__).parent / "lib" / "libc10.so"
    assert files["libc10.so"]["path"] == str(lib)
    assert files["libc10.so"]["sha256"] == hashlib.sha256(lib.read_bytes()).hexdigest()


def test_report_a_b_lists_what_differs_in_the_fingerprints(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGEBUILD_")}
    env["PYTHONPATH"] = str(REPO)
    env["COLUMNS"] = "200"
    proc = subprocess.run(
        [sys.executable, "-m", "imagebuild.inimage", "--checks", "environment", "--nproc", "1",
         "--allow-cpu", "--report", "a.json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first = json.loads((tmp_path / "a.json").read_text())
    assert_valid_report(first)
    assert any(f["name"] == "libtorch_cpu.so" for f in first["fingerprint"]["files"])
    second = copy.deepcopy(first)
    changed = next(f for f in second["fingerprint"]["files"] if f["name"] == "libc10.so")
    changed["sha256"] = "0" * 64
    changed["origin"] = "host (mounted at /opt/site)"
    (tmp_path / "b.json").write_text(json.dumps(second))
    assert differences(first["fingerprint"], second["fingerprint"])[0].startswith(
        "libc10.so: sha256 ")
    out = subprocess.run(
        [sys.executable, "-m", "imagebuild", "report", "a.json", "b.json", "--no-plot"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "fingerprint: 1 difference(s) in the libraries the runs loaded" in out.stdout
    assert "libc10.so: sha256" in out.stdout and "vs host (mounted at /opt/site)" in out.stdout
    same = subprocess.run(
        [sys.executable, "-m", "imagebuild", "report", "a.json", "a.json", "--no-plot"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert "byte for byte, from the same places" in same.stdout
