"""``imagebuild doctor x.sif|x.sqsh`` and validate's preflight for them: the manifest read
out of a real squashfs (tar2sqfs or mksquashfs) and a real SIF (siftool), no engine."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from imagebuild.convert.read_file import read_from_image_file, sif_partition
from imagebuild.convert.sif import wrap_squashfs
from imagebuild.convert.sources import ImageConfig, TarballSource
from imagebuild.convert.squashfs import squash_image
from imagebuild.errors import SquashError
from tests.doctor.test_command import assert_valid, run_cli
from tests.inimage.doctor.conftest import FIXTURES, build_case

pytestmark = pytest.mark.integration

MANIFEST = "opt/imagebuild/manifest.json"


def squashed(tmp_path: Path, image: str | None, device_code: dict | None = None
             ) -> tuple[Path, Path]:
    """A .sqsh and a .sif of a root file system holding fixture manifest ``image`` (and a
    device-code report)."""
    tar_path = tmp_path / "rootfs.tar"
    with tarfile.open(tar_path, "w") as tar:
        files = {"etc/os-release": b"ID=debian\n"}
        if image:
            files[MANIFEST] = (FIXTURES / "images" / f"{image}.json").read_bytes()
        if device_code:
            files["opt/imagebuild/device-code.json"] = json.dumps(device_code).encode()
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_600_000_000
            tar.addfile(info, io.BytesIO(data))
    config = ImageConfig(env=("PATH=/usr/bin:/bin",))
    sqsh = squash_image(TarballSource(tar_path, config), tmp_path / "img.sqsh").artifact.path
    sif = wrap_squashfs(sqsh, tmp_path / "img.sif", config, image_ref="imagebuild/x:1").path
    return sqsh, sif


def test_the_manifest_comes_out_of_both_files(tmp_path: Path) -> None:
    sqsh, sif = squashed(tmp_path, "rocm-7.2.4-gfx942")
    expected = json.loads((FIXTURES / "images/rocm-7.2.4-gfx942.json").read_text())
    assert json.loads(read_from_image_file(sqsh, "/" + MANIFEST) or "") == expected
    assert json.loads(read_from_image_file(sif, "/" + MANIFEST) or "") == expected
    offset, size = sif_partition(sif)
    assert sif.read_bytes()[offset:offset + size] == sqsh.read_bytes()  # siftool's partition
    assert read_from_image_file(sif, "/opt/imagebuild/none.json") is None


@pytest.mark.parametrize("suffix", [".sqsh", ".sif"])
def test_doctor_reads_a_squashed_image(suffix: str, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """LUMI's gfx90a against an image built for gfx942 only, named by its file."""
    image = squashed(tmp_path, "rocm-7.2.4-gfx942")[0 if suffix == ".sqsh" else 1]
    case = build_case("gfx-missing-lumi", tmp_path)
    report = tmp_path / "doctor.json"
    code, out, err = run_cli(capsys, "doctor", str(image), "--site", "lumi", "--root",
                             str(case.root), "--json", str(report))
    assert code == 1, out + err
    assert f"doctor: img{suffix} (ROCm 7.2.4, gfx942)" in out
    assert "FAIL  gfx" in out and "built for gfx942 only" in out
    document = json.loads(report.read_text())
    assert_valid(document)
    assert document["target"] == "file" and document["image"] == f"img{suffix}"


def test_a_missing_file_is_named_with_a_hint(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "doctor", str(tmp_path / "gone.sif"))
    assert code == 2
    assert "gone.sif: no such file" in err and "imagebuild build RECIPE --squash" in err
    assert "docker" not in err


def test_an_image_without_a_manifest_or_not_squashfs(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    sqsh, _ = squashed(tmp_path, None)
    code, _, err = run_cli(capsys, "doctor", str(sqsh))
    assert code == 2 and f"has no /{MANIFEST}" in err
    junk = tmp_path / "junk.sqsh"
    junk.write_bytes(b"\x00" * 8192)
    code, _, err = run_cli(capsys, "doctor", str(junk))
    assert code == 2 and "unsquashfs cannot read it" in err
    with pytest.raises(SquashError, match="not a SIF file"):
        sif_partition(junk)


def test_validate_preflight_reads_the_sif(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _, sif = squashed(tmp_path, "rocm-7.2.4-gfx942")
    case = build_case("gfx-missing-lumi", tmp_path)
    monkeypatch.setenv("IMAGEBUILD_NODE_ROOT", str(case.root))
    code, _, err = run_cli(capsys, "validate", str(sif), "--site", "lumi", "--gpus", "rocm",
                           "--launcher", "apptainer")
    assert code == 1, err
    assert "doctor: img.sif on this node" in err and "FAIL  gfx" in err
    assert "validate stopped before the GPU checks" in err


def test_the_device_code_report_comes_out_of_the_sif(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The manifest names gfx90a and gfx942; the report kept gfx942's code only: a LUMI-G
    node (gfx90a) fails on the report, not on the manifest."""
    _, sif = squashed(tmp_path, "rocm-6.4.4", {"targets": ["gfx942"], "checked": []})
    case = build_case("healthy-lumi", tmp_path)
    code, out, _ = run_cli(capsys, "doctor", str(sif), "--site", "lumi", "--root",
                           str(case.root))
    assert code == 1, out
    assert "FAIL  gfx" in out and "device-code.json keeps device code for gfx942 only" in out
