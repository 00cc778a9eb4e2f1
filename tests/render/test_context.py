"""build_context: the directory a build reads, and what it stages (lock, manifest, checks)."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from imagebuild.errors import LockError, RenderError
from imagebuild.lock.lockfile import lock_path, read_lock
from imagebuild.lock.uv import uv_binary
from imagebuild.recipe.load import load_recipe
from imagebuild.render.context import build_context
from imagebuild.render.dockerfile import render_dockerfile
from imagebuild.render.layout import (
    CHECKS_IMPORT_NAME,
    CHECKS_SOURCE,
    IMAGE_CHECKS_DIR,
    SHIM_PATH,
)
from imagebuild.render.manifest import manifest
from imagebuild.render.plan import plan_for
from imagebuild.render.python_files import python_lock
from tests.render.conftest import FIXTURES, REPO
from tests.support.render import served_lock, write_lock


@pytest.fixture
def cpu():
    recipe = load_recipe("cpu-test", FIXTURES)
    return recipe, read_lock(lock_path(recipe))


def test_context_holds_exactly_what_the_dockerfile_reads(tmp_path: Path, cpu):
    recipe, lock = cpu
    staged = build_context(plan_for(recipe, lock), tmp_path / "ctx")
    top = {f.split("/")[0] for f in staged.files}
    assert top == {"Dockerfile", "pylock.toml", "manifest.json", "fetch-uv.py", "bin", "checks"}
    text = staged.dockerfile.read_text()
    assert text == render_dockerfile(plan_for(recipe, lock))
    # Every context path the Dockerfile names is staged.
    mounts = [dict(f.split("=", 1) for f in spec.split(",") if "=" in f)
              for spec in re.findall(r"--mount=(\S+)", text)]
    named = {m["source"] for m in mounts if "source" in m and "from" not in m}
    named |= {m for m in re.findall(r"^COPY (\S+) ", text, re.MULTILINE) if not m.startswith("--")}
    for path in named:
        assert (staged.directory / path).exists(), path
    assert f"checks/{CHECKS_IMPORT_NAME}/__main__.py" in staged.files
    assert "checks/imagebuild_checks/gpus.json" in staged.files


def test_gpu_context_adds_the_tuning_kit_script(tmp_path: Path):
    recipe = load_recipe("rocm-7.0.2", REPO)
    lock = write_lock(recipe, tmp_path / "pylock.rocm-7.0.2.toml")
    staged = build_context(plan_for(recipe, lock), tmp_path / "ctx")
    assert "hipblaslt-tuning-kit.sh" in staged.files


def test_file_modes_do_not_depend_on_the_checkout(tmp_path: Path, cpu):
    recipe, lock = cpu
    old = os.umask(0o077)
    try:
        staged = build_context(plan_for(recipe, lock), tmp_path / "ctx")
    finally:
        os.umask(old)
    for name in staged.files:
        mode = stat.S_IMODE((staged.directory / name).stat().st_mode)
        assert mode == (0o755 if name == "bin/imagebuild" else 0o644), name


def test_file_times_do_not_depend_on_the_checkout(tmp_path: Path, cpu):
    """COPY keeps a context file's mtime (and BuildKit reuses a COPY whatever the mtimes):
    every staged path carries the lock's epoch, not the checkout's or the staging time."""
    recipe, lock = cpu
    assert lock.source_date_epoch is not None
    checks = tmp_path / "checkout"
    shutil.copytree(CHECKS_SOURCE, checks, ignore=shutil.ignore_patterns("__pycache__"))
    os.utime(checks / "__main__.py", (1_000_000_000, 1_000_000_000))
    staged = build_context(plan_for(recipe, lock), tmp_path / "ctx", checks_source=checks)
    paths = [staged.directory, *staged.directory.rglob("*")]
    assert len(paths) > len(staged.files)  # directories too
    assert {path.lstat().st_mtime for path in paths} == {lock.source_date_epoch}


def test_shim_runs_the_checks_with_the_image_python(tmp_path: Path, cpu):
    recipe, lock = cpu
    shim = (build_context(plan_for(recipe, lock), tmp_path / "ctx").directory / "bin/imagebuild").read_text()
    assert shim.startswith("#!/bin/sh\n")
    assert f'PYTHONPATH="{IMAGE_CHECKS_DIR}' in shim
    assert f'exec /opt/venv/bin/python -m {CHECKS_IMPORT_NAME} "$@"' in shim
    assert f"COPY bin/imagebuild {SHIM_PATH}" in render_dockerfile(plan_for(recipe, lock))


def test_unlocked_recipe_is_refused(tmp_path: Path):
    recipe = load_recipe("rocm-7.0.2", REPO)
    with pytest.raises(LockError, match=r"not locked; run `imagebuild lock rocm-7.0.2`"):
        build_context(plan_for(recipe, None), tmp_path / "ctx")
    assert not (tmp_path / "ctx").exists()


def test_restaging_clears_only_an_imagebuild_context(tmp_path: Path, cpu):
    recipe, lock = cpu
    ctx = tmp_path / "ctx"
    build_context(plan_for(recipe, lock), ctx)
    (ctx / "leftover").write_text("x")
    build_context(plan_for(recipe, lock), ctx)
    assert not (ctx / "leftover").exists()
    foreign = tmp_path / "home"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("keep")
    with pytest.raises(RenderError, match="refusing to clear it"):
        build_context(plan_for(recipe, lock), foreign)
    assert (foreign / "precious.txt").read_text() == "keep"


def test_missing_checks_are_an_error(tmp_path: Path, cpu):
    recipe, lock = cpu
    with pytest.raises(RenderError, match="in-image checks not found"):
        build_context(plan_for(recipe, lock), tmp_path / "ctx", checks_source=tmp_path / "nothing")


def test_manifest_lists_every_pin_for_the_in_image_checks(tmp_path: Path):
    recipe = load_recipe("rocm-7.0.2", REPO)
    lock = write_lock(recipe, tmp_path / "pylock.rocm-7.0.2.toml")
    data = manifest(plan_for(recipe, lock))
    # The keys imagebuild/inimage reads.
    assert data["recipe"] == "rocm-7.0.2"
    assert data["input_hash"] == recipe.input_hash()
    assert data["rocm_version"] == "7.0.2"
    assert data["python_version"] == "3.12"
    assert data["gpu_targets"] == ["gfx90a", "gfx942"]
    assert data["wheels"] == {w.name: w.version for w in lock.wheels}
    assert data["hipblaslt"]["enabled"] is True
    assert data["hipblaslt"]["commit"] == lock.git("hipblaslt").commit
    assert data["hipblaslt"]["bench"] == "/opt/hipblaslt/bin/hipblaslt-bench"
    assert data["network_plugin"] == data["network_plugin"] | {
        "enabled": True, "kind": "aws-ofi-nccl", "commit": lock.git("network-plugin").commit,
        "library": "/opt/aws-ofi-nccl/lib/librccl-net.so"}
    assert data["network_plugin"]["libfabric"]["sha256"] == lock.archive("libfabric").sha256
    assert data["base_image"]["digest"] == lock.base_digest
    assert json.loads(json.dumps(data)) == data
    assert manifest(plan_for(recipe, lock)) == data  # deterministic: no timestamps


def test_cpu_manifest_says_cpu_only(cpu):
    recipe, lock = cpu
    data = manifest(plan_for(recipe, lock))
    assert data["rocm_version"] is None
    assert data["hipblaslt"] == {"enabled": False}
    assert data["network_plugin"] == {"enabled": False}


def test_python_lock_holds_only_the_wheels(cpu):
    _recipe, lock = cpu
    document = tomllib.loads(python_lock(lock))
    assert document["lock-version"] == "1.0"
    assert document["requires-python"] == "==3.11.*"
    assert "tool" not in document  # git commits and the base digest stay out of it
    assert [(p["name"], p["version"]) for p in document["packages"]] == \
        [(w.name, w.version) for w in lock.wheels]
    for package, wheel in zip(document["packages"], lock.wheels):
        assert package["wheels"] == [{"url": wheel.url, "hashes": {"sha256": wheel.sha256},
                                      "size": wheel.size}]


def _uv_sync(venv: Path, pylock: Path, cache: Path) -> subprocess.CompletedProcess:
    uv = uv_binary()
    subprocess.run([uv, "venv", "-q", "--python", "python3", str(venv)], check=True,
                   env=dict(os.environ, UV_PYTHON_DOWNLOADS="never"))
    return subprocess.run(
        [uv, "pip", "sync", "--python", str(venv / "bin" / "python"), "--require-hashes",
         "--no-index", "--preview-features", "pylock", str(pylock)],
        check=False, capture_output=True, text=True,
        env=dict(os.environ, UV_CACHE_DIR=str(cache), UV_PYTHON_DOWNLOADS="never"))


def _rewrite_payload(wheel: Path, member: str) -> None:
    with zipfile.ZipFile(wheel) as archive:
        entries = [(info, archive.read(info)) for info in archive.infolist()]
    with zipfile.ZipFile(wheel, "w") as archive:
        for info, data in entries:
            if info.filename == member:
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            archive.writestr(info, data)


def test_staged_pylock_installs_exactly_the_locked_files(tmp_path: Path, index_server):
    """The python stage's command against a real index: only the lock's URLs are fetched,
    and a wheel whose bytes changed is refused."""
    recipe = replace(load_recipe("cpu-test", FIXTURES),
                     python=f"{sys.version_info.major}.{sys.version_info.minor}")
    (index_server.directory / "unrelated-9.9-py3-none-any.whl").write_bytes(b"never fetched")
    lock = served_lock(recipe, index_server, [("torch", "2.13.0+cpu"), ("tinydep", "1.0")],
                       "sha256:" + "0" * 64, tmp_path / f"pylock.{recipe.name}.toml",
                       payload_size=256)
    staged = build_context(plan_for(recipe, lock), tmp_path / "ctx")
    result = _uv_sync(tmp_path / "venv", staged.directory / "pylock.toml", tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    fetched = sorted(r.path for r in index_server.requests)
    assert fetched == sorted("/" + w.filename for w in lock.wheels)
    check = subprocess.run([str(tmp_path / "venv/bin/python"), "-c",
                            "import torch, tinydep; print(torch.__version__)"],
                           check=True, capture_output=True, text=True)
    assert check.stdout.strip() == "2.13.0+cpu"

    # Same URL and size, a valid zip, one payload byte changed: only the pinned sha256 can
    # tell, and it refuses the file (fresh cache, fresh venv).
    wheel = index_server.directory / lock.wheels[1].filename
    _rewrite_payload(wheel, "tinydep/_payload.bin")
    assert wheel.stat().st_size == lock.wheels[1].size
    result = _uv_sync(tmp_path / "venv2", staged.directory / "pylock.toml", tmp_path / "cache2")
    assert result.returncode != 0
    assert "hash mismatch" in result.stderr.lower()
