"""The checks before a build that squashes: tools, a writable output directory and room in
it, each refused with the option it concerns and a hint, and nothing created by checking."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from imagebuild.convert.readiness import (
    MINIMUM_PER_FILE,
    check_ready_to_squash,
    estimate_room,
)
from imagebuild.errors import SquashError

GIB = 1 << 30


def which(found: set[str]):  # type: ignore[no-untyped-def]
    return lambda name: f"/usr/bin/{name}" if name in found else None


def test_a_missing_squash_tool_is_named_with_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(SquashError) as info:
        check_ready_to_squash(("sqsh",), tmp_path, "x", which=which({"siftool"}))
    assert info.value.text() == "--squash sqsh: tar2sqfs or mksquashfs not found on PATH"
    assert info.value.hint == ("install squashfs-tools-ng (tar2sqfs) or squashfs-tools >= 4.5 "
                               "(mksquashfs -tar); nothing was built")


def test_a_missing_sif_tool_is_named(tmp_path: Path) -> None:
    with pytest.raises(SquashError) as info:
        check_ready_to_squash(("sqsh", "sif"), tmp_path, "x", which=which({"tar2sqfs"}))
    assert info.value.text() == "--squash sqsh,sif: neither apptainer nor siftool found on PATH"
    assert info.value.hint and "siftool" in info.value.hint
    # either tool does: which engine holds the image is not known before the build
    ready = check_ready_to_squash(("sif",), tmp_path, "x", which=which({"tar2sqfs",
                                                                        "apptainer"}))
    assert ready.sif_method == "apptainer"


def test_a_file_in_the_way_of_the_output_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "artifacts"
    blocker.write_text("not a directory")
    with pytest.raises(SquashError) as info:
        check_ready_to_squash(("sqsh",), blocker / "deeper", "x", which=which({"tar2sqfs"}))
    assert info.value.text() == (f"--output-dir {blocker / 'deeper'}: {blocker} is a file, "
                                 "not a directory")


def test_a_missing_output_directory_is_checked_where_it_would_be_made(tmp_path: Path) -> None:
    seen: list[Path] = []

    def free(path: Path) -> int:
        seen.append(path)
        return 100 * GIB

    out = tmp_path / "a" / "b"
    ready = check_ready_to_squash(("sqsh",), out, "x", which=which({"tar2sqfs"}), free=free)
    assert seen == [tmp_path] and ready.free == 100 * GIB
    assert not out.exists() and list(tmp_path.iterdir()) == []  # the check left nothing


def test_too_little_room_is_refused_with_the_estimate_it_used(tmp_path: Path) -> None:
    with pytest.raises(SquashError) as info:
        check_ready_to_squash(("sqsh", "sif"), tmp_path, "x", which=which({"tar2sqfs",
                                                                            "siftool"}),
                              free=lambda _: GIB // 2)
    assert info.value.text() == (
        f"--output-dir {tmp_path}: 0.5 GiB free in {tmp_path}, --squash sqsh,sif needs about "
        "2.0 GiB (no earlier build of x recorded there: at least 1.0 GiB per file, 2 files)")
    assert info.value.hint == "free space there or choose another --output-dir; nothing was built"


def test_the_estimate_prefers_the_last_artifacts_then_the_image_size(tmp_path: Path) -> None:
    assert estimate_room(tmp_path, "x", ("sqsh",), None)[0] == MINIMUM_PER_FILE
    # a sif made by siftool alone keeps its squashfs until it is done: two files
    assert estimate_room(tmp_path, "x", ("sif",), "siftool")[0] == 2 * MINIMUM_PER_FILE
    (tmp_path / "x.build.json").write_text(json.dumps({"sizes": {"total_bytes": 3 * GIB}}))
    needed, basis = estimate_room(tmp_path, "x", ("sqsh",), None)
    assert needed == 3 * GIB and basis.startswith("the last build's image size (3.0 GiB) x 1 file, uncompressed: an upper bound")
    (tmp_path / "x.artifacts.json").write_text(json.dumps({"artifacts": [
        {"kind": "sqsh", "size": GIB}, {"kind": "edf", "size": 300}]}))
    needed, basis = estimate_room(tmp_path, "x", ("sqsh",), None)
    assert needed == int(1.1 * GIB) and basis == "the last artifacts of x (1.0 GiB) + 10%"
    # a format the last squash did not write: the image size again
    assert estimate_room(tmp_path, "x", ("sqsh", "sif"), "siftool")[0] == 6 * GIB


@contextmanager
def tmpfs(path: Path, options: str) -> Iterator[Path]:
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                             capture_output=True, text=True, check=False)
    assert mounted.returncode == 0, f"cannot mount a tmpfs here: {mounted.stderr.strip()}"
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False)


@pytest.mark.integration
def test_a_real_small_or_read_only_file_system_is_refused(tmp_path: Path) -> None:
    """Real statvfs and a real write attempt: a 64 MiB tmpfs, then a read-only one."""
    tools = which({"tar2sqfs"}) if shutil.which("tar2sqfs") else shutil.which
    with tmpfs(tmp_path / "small", "size=64m") as small:
        with pytest.raises(SquashError, match=r"0\.1 GiB free in .*needs about 1\.0 GiB"):
            check_ready_to_squash(("sqsh",), small / "artifacts", "x", which=tools)
        assert list(small.iterdir()) == []
    with tmpfs(tmp_path / "readonly", "ro,size=1g") as readonly:
        with pytest.raises(SquashError) as info:
            check_ready_to_squash(("sqsh",), readonly / "artifacts", "x", which=tools)
        assert info.value.text() == (f"--output-dir {readonly / 'artifacts'}: cannot write "
                                     f"there (its parent {readonly} is where it is made): "
                                     "Read-only file system")
