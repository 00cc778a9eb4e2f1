"""Round trip through the real squashfs writers: what goes in as tar comes back out."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from imagebuild.convert.sources import TarballSource
from imagebuild.convert.squashfs import find_squash_tool, squash_image
from imagebuild.files import sha256_file
from tests.convert.conftest import CONFIG, Crafted
from tests.support.squashfs import hardlink_groups, read_squashfs, unsquashfs_listing

pytestmark = pytest.mark.integration


def test_metadata_survives(crafted: Crafted, squash_tool, tmp_path: Path) -> None:
    out = tmp_path / "out" / "image.sqsh"
    result = squash_image(TarballSource(crafted.path, CONFIG), out, tool=squash_tool)
    members = read_squashfs(out)

    for name, (kind, mode, uid, gid, link, data, xattrs) in crafted.expected.items():
        if name == ".dockerenv" or name.startswith("dev/"):
            assert name not in members, f"{name}: engine-made member was kept"
            continue
        if name == "etc/environment":
            continue  # replaced by the enroot convention (tested in test_conventions)
        got = members[name]
        if kind == "hardlink":
            assert frozenset({name, link}) in hardlink_groups(members), name
            continue
        assert got.type == kind, name
        assert got.mode == mode, f"{name}: mode {oct(got.mode)} != {oct(mode)}"
        assert (got.uid, got.gid) == (uid, gid), name
        if kind == "symlink":
            assert got.linkname == link, name
        if kind == "file":
            assert got.sha256 == hashlib.sha256(data).hexdigest(), name
        assert got.xattrs == xattrs, f"{name}: xattrs"
    assert sorted(result.stats.dropped) == [".dockerenv", "dev/null"]
    assert result.artifact.sha256 == sha256_file(out)


def test_setuid_and_ownership_seen_by_unsquashfs(crafted: Crafted, squash_tool,
                                                 tmp_path: Path) -> None:
    """A second, independent reader (squashfs-tools' unsquashfs) agrees."""
    out = tmp_path / "image.sqsh"
    squash_image(TarballSource(crafted.path, CONFIG), out, tool=squash_tool)
    listing = unsquashfs_listing(out)
    assert listing["bin/su"] == "-rwsr-xr-x 0/0"
    assert listing["bin/wall"] == "-rwxr-sr-x 0/5"
    assert listing["tmp"] == "drwxrwxrwt 0/0"
    assert listing["home/user"] == "drwx------ 1000/1000"
    assert listing["etc/shadow"] == "-rw-r----- 0/42"
    assert listing[""] == "drwxr-xr-x 0/0"  # the root inode


def test_mtimes_kept_below_the_clamp_and_clamped_above(crafted: Crafted, squash_tool,
                                                       tmp_path: Path) -> None:
    out = tmp_path / "image.sqsh"
    squash_image(TarballSource(crafted.path, CONFIG), out, tool=squash_tool)
    members = read_squashfs(out)
    assert members["opt/old"].mtime == 1_000
    assert members["bin/su"].mtime == 1_600_000_000
    assert members["opt/new"].mtime == CONFIG.created  # later than the image: clamped
    assert members["etc/rc"].mtime == CONFIG.created  # injected files get the image time
    if squash_tool.name == "tar2sqfs":
        # mksquashfs 4.5.1 ignores -root-time in -tar mode: its root carries the wall time.
        assert members[""].mtime == CONFIG.created


def test_same_input_gives_same_bytes(crafted: Crafted, tmp_path: Path) -> None:
    """tar2sqfs output is a function of the input alone: not of the wall clock (runs a
    second apart) nor of the number of compressor threads."""
    tool = find_squash_tool("tar2sqfs")
    first = squash_image(TarballSource(crafted.path, CONFIG), tmp_path / "a.sqsh", tool=tool)
    time.sleep(1.1)
    second = squash_image(TarballSource(crafted.path, CONFIG), tmp_path / "b.sqsh", tool=tool,
                          jobs=1)
    assert first.artifact.sha256 == second.artifact.sha256


def test_source_date_epoch_changes_the_clamp(crafted: Crafted, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1650000000")
    out = tmp_path / "image.sqsh"
    squash_image(TarballSource(crafted.path, CONFIG), out)
    members = read_squashfs(out)
    assert members["opt/new"].mtime == 1_650_000_000
    assert members["bin/su"].mtime == 1_600_000_000
