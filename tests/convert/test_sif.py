"""SIF assembled with the real siftool from the squashfs: structure, header, partition."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from imagebuild.convert.formats import convert
from imagebuild.convert.sif import LAUNCH_SCRIPT, choose_method, wrap_squashfs
from imagebuild.convert.sources import TarballSource
from imagebuild.convert.squashfs import squash_image
from imagebuild.errors import SquashError
from tests.convert.conftest import CONFIG, Crafted
from tests.support.squashfs import read_squashfs, sif_object, sif_objects

pytestmark = pytest.mark.integration


def test_sif_wraps_the_squashfs_bytes(crafted: Crafted, tmp_path: Path) -> None:
    sqsh = squash_image(TarballSource(crafted.path, CONFIG), tmp_path / "image.sqsh").artifact
    sif = wrap_squashfs(sqsh.path, tmp_path / "image.sif", CONFIG, image_ref="imagebuild/x:1")

    objects = sif_objects(sif.path)
    assert [o["type"] for o in objects] == ["Def.FILE", "JSON.Generic",
                                            "FS (Squashfs/*System/amd64)"]
    assert {o["group"] for o in objects} == {"1"}
    assert sif_object(sif.path, 1) == b"bootstrap: docker-daemon\nfrom: imagebuild/x:1\n"
    assert json.loads(sif_object(sif.path, 2)) == dict(CONFIG.raw)
    partition = sif_object(sif.path, 3)
    assert hashlib.sha256(partition).hexdigest() == sqsh.sha256

    info = subprocess.run(["siftool", "info", "3", str(sif.path)], check=True,
                          capture_output=True, text=True).stdout
    assert "Filesystem Type:  Squashfs" in info
    assert "Partition Type:   *System" in info  # primary system partition
    assert "Architecture:     amd64" in info

    with open(sif.path, "rb") as stream:
        assert stream.read(32) == LAUNCH_SCRIPT.ljust(32, b"\0")
    assert (tmp_path / "image.sif.sha256").read_text() == f"{sif.sha256}  image.sif\n"


def test_partition_holds_the_apptainer_layout(crafted: Crafted, tmp_path: Path) -> None:
    (artifact,) = convert(TarballSource(crafted.path, CONFIG), tmp_path / "out", "img",
                          ("sif",), sif_method="siftool")
    assert artifact.kind == "sif"
    # only the .sif and its sidecar: the partition's temporary squashfs is gone
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["img.sif", "img.sif.sha256"]
    objects = sif_objects(artifact.path)
    part_id = int(next(o["id"] for o in objects if o["type"].startswith("FS (Squashfs")))
    dumped = tmp_path / "partition.sqsh"
    dumped.write_bytes(sif_object(artifact.path, part_id))
    members = read_squashfs(dumped)
    assert json.loads(members[".singularity.d/labels.json"].data) == dict(CONFIG.labels)
    assert members[".singularity.d/env/10-docker2singularity.sh"].data.startswith(b"#!/bin/sh\n")
    assert members[".singularity.d/runscript"].mode == 0o755
    assert members["bin/su"].mode == 0o4755


def test_sqsh_and_sif_share_one_squash(crafted: Crafted, tmp_path: Path) -> None:
    artifacts = convert(TarballSource(crafted.path, CONFIG), tmp_path, "img", ("sqsh", "sif"),
                        sif_method="siftool")
    sqsh, sif = artifacts
    objects = sif_objects(sif.path)
    part_id = int(next(o["id"] for o in objects if o["type"].startswith("FS (Squashfs")))
    assert hashlib.sha256(sif_object(sif.path, part_id)).hexdigest() == sqsh.sha256


def test_method_choice() -> None:
    def which(found: set[str]):  # type: ignore[no-untyped-def]
        return lambda name: f"/usr/bin/{name}" if name in found else None

    assert choose_method("auto", "img:1", which({"apptainer", "siftool"})) == "apptainer"
    assert choose_method("auto", None, which({"apptainer", "siftool"})) == "siftool"
    assert choose_method("auto", "img:1", which({"siftool"})) == "siftool"
    with pytest.raises(SquashError, match="neither apptainer nor siftool"):
        choose_method("auto", "img:1", which(set()))
    with pytest.raises(SquashError, match="apptainer not found"):
        choose_method("apptainer", "img:1", which({"siftool"}))
