"""Reproducible artifacts: the clamp time, two squashes and two SIFs of one image, and the
comparison that names what differs when two squashfs images are not the same."""

from __future__ import annotations

import dataclasses
import io
import tarfile
import time
from pathlib import Path

import pytest

from imagebuild.convert.reproducible import compare_squashfs, report_lines
from imagebuild.convert.sif import wrap_squashfs
from imagebuild.convert.sources import TarballSource
from imagebuild.convert.squashfs import reproducible_epoch, squash_image
from imagebuild.errors import SquashError
from imagebuild.lock.epoch import EPOCH_LABEL
from tests.convert.conftest import CONFIG, Crafted, craft_rootfs
from tests.support.squashfs import read_squashfs

EPOCH = 1_800_000_000
LABELLED = dataclasses.replace(CONFIG, labels=(*CONFIG.labels, (EPOCH_LABEL, str(EPOCH))))


def test_the_clamp_time_is_the_environment_then_the_lock_label_then_the_image_time() -> None:
    assert reproducible_epoch(LABELLED, {"SOURCE_DATE_EPOCH": "42"}) == 42
    assert reproducible_epoch(LABELLED, {}) == EPOCH
    assert reproducible_epoch(CONFIG, {}) == CONFIG.created
    bad = dataclasses.replace(CONFIG, labels=((EPOCH_LABEL, "yesterday"),))
    with pytest.raises(SquashError, match=f"label {EPOCH_LABEL}: expected whole seconds"):
        reproducible_epoch(bad, {})


@pytest.mark.integration
def test_two_squashes_and_sifs_of_one_image_are_identical(crafted: Crafted,
                                                         tmp_path: Path) -> None:
    """Different wall times (siftool stamps its header with them) give the same bytes."""
    outputs = []
    for name in ("a", "b"):
        sqsh = squash_image(TarballSource(crafted.path, LABELLED), tmp_path / f"{name}.sqsh")
        sif = wrap_squashfs(sqsh.artifact.path, tmp_path / f"{name}.sif", LABELLED,
                            image_ref="imagebuild/x:1")
        outputs.append((sqsh.artifact.sha256, sif.sha256))
        time.sleep(1.1)
    assert outputs[0] == outputs[1]
    members = read_squashfs(tmp_path / "a.sqsh")
    assert members["opt/new"].mtime == EPOCH  # written by the build: clamped
    assert members["opt/old"].mtime == 1_000  # older than the lock: kept
    assert members["etc/rc"].mtime == EPOCH  # injected
    header = (tmp_path / "a.sif").read_bytes()[64:80]
    assert header == EPOCH.to_bytes(8, "little") * 2  # created and modified


@pytest.mark.integration
def test_a_comparison_names_the_files_and_what_differs(tmp_path: Path) -> None:
    first = craft_rootfs(tmp_path / "a.tar").path
    second = tmp_path / "b.tar"
    with tarfile.open(first) as tin, tarfile.open(second, "w", format=tarfile.PAX_FORMAT) as tout:
        for member in tin:
            body = tin.extractfile(member) if member.isreg() else None
            if member.name == "etc/shadow":
                data = b"root:!:19000:0:99999:7:::\n"
                member.size = len(data)
                tout.addfile(member, io.BytesIO(data))
                continue
            if member.name == "bin/sh-ish":
                member.mode, member.mtime = 0o700, 1_500_000_000
            if member.name == "home/user/empty":
                continue
            tout.addfile(member, body)
    a = squash_image(TarballSource(first, CONFIG), tmp_path / "a.sqsh").artifact.path
    b = squash_image(TarballSource(second, CONFIG), tmp_path / "b.sqsh").artifact.path

    comparison = compare_squashfs(a, b)
    assert not comparison.identical
    by_path = {d.path: d.what for d in comparison.differences}
    assert by_path == {
        "bin/sh-ish": ("mode 0755 != 0700", "mtime 1600000000 != 1500000000"),
        "etc/shadow": ("content",),
        "home/user/empty": ("only in a",),
    }
    lines = list(report_lines(comparison))
    assert lines[0].startswith("NOT reproducible: sha256:")
    assert "3 of " in lines[1] and "content 1" in lines[1] and "mode 1" in lines[1]
    assert lines[2] == "  /bin/sh-ish: mode 0755 != 0700, mtime 1600000000 != 1500000000"
    assert next(iter(report_lines(compare_squashfs(a, a)))).startswith("reproducible: ")
