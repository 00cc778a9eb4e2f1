"""rocm-binds from the host (apptainer --rocm, a site bind of /opt/rocm) and inside the
image (apptainer --rocm's /.singularity.d/libs mounts in mountinfo), and MIOpen's cache on
the image's read-only file system (kernel squashfs, squashfuse, a read-only mount), on
node trees shaped like LUMI-G's."""

from __future__ import annotations

from pathlib import Path

from imagebuild.inimage.doctor import miopen
from imagebuild.inimage.doctor.finding import FAIL, PASS
from imagebuild.inimage.doctor.node import Node
from imagebuild.inimage.doctor.rocm_binds import check_launch, check_mounts
from tests.inimage.doctor.conftest import build_case


def test_apptainer_rocm_from_the_host_fails() -> None:
    finding = check_launch(("/opt/cray:/opt/cray:ro",), bind_host_rocm=True)
    assert finding.status == FAIL and "apptainer --rocm" in finding.reason
    assert "bind_host_rocm: false" in finding.fix


def test_a_site_bind_over_the_images_rocm_fails() -> None:
    for bind in ("/opt/rocm-6.0.3:/opt/rocm:ro", "/opt/rocm",
                 "/usr/lib64/librccl.so.1:/usr/lib64/librccl.so.1"):
        finding = check_launch(("/scratch:/scratch", bind), bind_host_rocm=False)
        assert finding.status == FAIL and bind in finding.reason, bind
    lumi = ("/opt/cray:/opt/cray:ro", "/var/spool/slurmd:/var/spool/slurmd",
            "/usr/lib64/libcxi.so.1:/usr/lib64/libcxi.so.1")
    assert check_launch(lumi, bind_host_rocm=False).status == PASS


#: apptainer --rocm inside the image: one read-only bind per host library into
#: /.singularity.d/libs (mountinfo fields: id, parent, dev, root, point, options, -, type,
#: source, super options).
SINGULARITY_LIBS = (
    "301 22 0:44 /opt/rocm-5.2.3/lib/librccl.so.1.0 /.singularity.d/libs/librccl.so.1 "
    "ro,nosuid,nodev,relatime - xfs /dev/sda3 rw\n"
    "302 22 0:44 /opt/rocm-5.2.3/lib/libhsa-runtime64.so.1.5.50203 "
    "/.singularity.d/libs/libhsa-runtime64.so.1 ro,nosuid,nodev,relatime - xfs /dev/sda3 rw\n")


def test_apptainer_rocm_libraries_in_mountinfo_fail(tmp_path: Path) -> None:
    case = build_case("healthy-lumi", tmp_path)
    mountinfo = case.root / "proc/self/mountinfo"
    assert check_mounts(Node(case.root)).status == PASS
    mountinfo.write_text(mountinfo.read_text() + SINGULARITY_LIBS)
    finding = check_mounts(Node(case.root))
    assert finding.status == FAIL
    assert finding.reason.startswith("/.singularity.d/libs/librccl.so.1 is a mount of "
                                     "/dev/sda3:/opt/rocm-5.2.3/lib/librccl.so.1.0")
    assert "(and 1 more)" in finding.reason and "without --rocm" in finding.fix


def _miopen_on(tmp_path: Path, mount_line: str) -> tuple[str, str]:
    """MIOpen's paths under /opt/miopen, on the file system ``mount_line`` mounts there."""
    case = build_case("healthy-lumi", tmp_path)
    mounts = case.root / "proc/mounts"
    mounts.write_text(mounts.read_text() + mount_line + "\n")
    env = {"HOME": "/users/u", "MIOPEN_USER_DB_PATH": "/opt/miopen/db",
           "MIOPEN_CUSTOM_CACHE_DIR": "/opt/miopen/cache"}
    finding = miopen.check(Node(case.root), env)
    return finding.status, finding.reason


def test_miopen_on_the_images_squashfs_fails(tmp_path: Path) -> None:
    status, reason = _miopen_on(tmp_path / "kernel", "/dev/loop3 /opt squashfs ro,relatime 0 0")
    assert status == FAIL and "on squashfs /opt, read-only" in reason
    # squashfuse (enroot, unprivileged apptainer) says rw; the file system is read-only.
    status, reason = _miopen_on(tmp_path / "fuse", "squashfuse_ll /opt fuse.squashfuse_ll "
                                "rw,nosuid,nodev,relatime,user_id=1000,group_id=1000 0 0")
    assert status == FAIL and "on fuse.squashfuse_ll /opt, read-only" in reason


def test_miopen_on_a_read_only_mount_fails(tmp_path: Path) -> None:
    status, reason = _miopen_on(tmp_path, "/dev/sdb1 /opt ext4 ro,relatime 0 0")
    assert status == FAIL and "/opt/miopen/db (MIOPEN_USER_DB_PATH) is on ext4 /opt, " \
                              "read-only" in reason
    status, _ = _miopen_on(tmp_path / "rw", "/dev/sdb1 /opt ext4 rw,relatime 0 0")
    assert status == PASS
