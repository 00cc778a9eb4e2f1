"""Squashing real images from a real Docker engine (and podman): export -> .sqsh/.sif/EDF."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagebuild import cli
from imagebuild.commands.squash import resolve_target
from imagebuild.convert.squashfs import squash_image
from imagebuild.convert.tarfilter import HOST_FILES
from imagebuild.engine.select import open_engine
from tests.support.squashfs import cat, hardlink_groups, members_of_tar, read_squashfs

pytestmark = [pytest.mark.integration, pytest.mark.docker]

TEST_IMAGE = "imagebuild-test/squash:features"
DOCKERFILE = """\
FROM {base}
RUN useradd -m -u 1234 alice \\
 && install -m 4755 /bin/true /usr/local/bin/suid-true \\
 && ln /usr/local/bin/suid-true /usr/local/bin/suid-link \\
 && mkdir -p /opt/stamp && echo old > /opt/stamp/old && touch -d @1500000000 /opt/stamp/old
ENV GREETING="hello world" \\
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /workspace
LABEL org.opencontainers.image.title="squash test" rocm="7.0.2"
VOLUME /data
ENTRYPOINT ["/bin/echo"]
CMD ["from", "cmd"]
"""


@pytest.fixture(scope="session")
def feature_image(docker_engine, base_image: str) -> str:  # type: ignore[no-untyped-def]
    """An image with ENV, WORKDIR, LABEL, VOLUME, ENTRYPOINT, CMD, a user, setuid, a hard link."""
    client = docker_engine.client
    dockerfile = io.BytesIO(DOCKERFILE.format(base=base_image).encode())
    # The SDK's classic builder is enough here (BuildKit is the build stage's business);
    # host networking because dockerd runs without a bridge in CI.
    client.images.build(fileobj=dockerfile, tag=TEST_IMAGE, network_mode="host", rm=True)
    return TEST_IMAGE


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "artifacts"


def test_config_from_the_engine(docker_engine, feature_image: str) -> None:  # type: ignore[no-untyped-def]
    config = docker_engine.image_source(feature_image).config()
    assert "GREETING=hello world" in config.env
    assert config.workdir == "/workspace"
    assert config.entrypoint == ("/bin/echo",)
    assert config.cmd == ("from", "cmd")
    assert dict(config.labels) == {"org.opencontainers.image.title": "squash test",
                                   "rocm": "7.0.2"}
    assert config.volumes == ("/data",)
    assert config.created and abs(config.created - time.time()) < 7 * 24 * 3600
    assert docker_engine.image_config(feature_image) == config


def test_squash_matches_the_export(docker_engine, feature_image: str, out: Path) -> None:  # type: ignore[no-untyped-def]
    source = docker_engine.image_source(feature_image)
    config = source.config()
    result = squash_image(source, out / "features.sqsh")
    sqsh = result.artifact.path
    members = read_squashfs(sqsh)

    # Every path of a plain `docker export` is in the squashfs with the same metadata,
    # except the engine's own files and the convention files written on purpose.
    with source.rootfs_tar() as stream:
        exported = members_of_tar(stream)
    replaced = {"etc/environment", "etc/fstab", "etc/rc", "etc/rc.local", *HOST_FILES}
    for path, want in exported.items():
        if path == ".dockerenv" or path.startswith("dev/"):
            assert path not in members, path
            continue
        got = members[path]
        if path in replaced or want.type == "hardlink":
            continue
        assert (got.type, got.mode, got.uid, got.gid, got.linkname, got.sha256) == \
            (want.type, want.mode, want.uid, want.gid, want.linkname, want.sha256), path
        assert got.mtime == min(want.mtime, config.created), path

    assert members["usr/local/bin/suid-true"].mode == 0o4755
    assert frozenset({"usr/local/bin/suid-true", "usr/local/bin/suid-link"}) in \
        hardlink_groups(members)
    assert (members["home/alice"].uid, members["home/alice"].gid) == (1234, 1234)
    assert members["opt/stamp/old"].mtime == 1_500_000_000
    assert members["dev"].type == "dir"
    assert all(members[name].size == 0 and members[name].mode == 0o644 for name in HOST_FILES)
    assert cat(sqsh, "/etc/environment").decode().splitlines() == list(config.env)
    assert "exec '/bin/echo' 'from' 'cmd'" in cat(sqsh, "/etc/rc").decode()
    assert cat(sqsh, "/etc/fstab").decode() == \
        "${ENROOT_ROOTFS}/data /data none x-create=dir,bind,rw,nosuid,nodev\n"
    assert (out / "features.sqsh.sha256").read_text().startswith(result.artifact.sha256)


def test_same_image_twice_gives_same_bytes(docker_engine, feature_image: str,  # type: ignore[no-untyped-def]
                                           out: Path) -> None:
    """Two exports (two containers, created seconds apart) -> one squashfs."""
    first = squash_image(docker_engine.image_source(feature_image), out / "a.sqsh")
    time.sleep(1.1)
    # a second engine, opened as `imagebuild squash` opens one (no client binary needed)
    second = squash_image(open_engine("docker", for_build=False).image_source(feature_image),
                          out / "b.sqsh")
    assert first.artifact.sha256 == second.artifact.sha256


def test_no_export_containers_left_behind(docker_engine, feature_image: str, out: Path) -> None:  # type: ignore[no-untyped-def]
    client = docker_engine.client
    before = {c.id for c in client.containers.list(all=True)}
    squash_image(docker_engine.image_source(feature_image), out / "a.sqsh")
    assert {c.id for c in client.containers.list(all=True)} == before


@pytest.fixture
def unpacked(docker_engine, feature_image: str, tmp_path: Path) -> Iterator[Path]:  # type: ignore[no-untyped-def]
    if os.geteuid() != 0:
        pytest.skip("running the image with chroot needs root (CI runs as root)")
    sqsh = squash_image(docker_engine.image_source(feature_image),
                        tmp_path / "f.sqsh").artifact.path
    root = tmp_path / "root"
    subprocess.run(["unsquashfs", "-q", "-n", "-d", str(root), str(sqsh)], check=True,
                   capture_output=True)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def chroot(root: Path, *argv: str) -> str:
    binary = shutil.which("chroot") or "/usr/sbin/chroot"
    return subprocess.run([binary, str(root), *argv], check=True, capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin"}).stdout


def test_rc_runs_the_image_like_enroot(unpacked: Path) -> None:
    """enroot starts a container by running /etc/rc with the user's arguments."""
    assert chroot(unpacked, "/bin/sh", "/etc/rc") == "from cmd\n"
    assert chroot(unpacked, "/bin/sh", "/etc/rc", "my", "args") == "my args\n"
    assert chroot(unpacked, "/bin/sh", "-c", "cd / && . /etc/rc.local; echo ok") == "ok\n"


def test_apptainer_files_run_like_apptainer(unpacked: Path) -> None:
    env = chroot(unpacked, "/bin/sh", "-c",
                 'for s in /.singularity.d/env/*.sh; do . "$s"; done; '
                 'printf "%s|%s" "$GREETING" "$PATH"')
    assert env == ("hello world|/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                   "/usr/bin:/sbin:/bin")
    assert chroot(unpacked, "/.singularity.d/actions/run") == "from cmd\n"
    assert chroot(unpacked, "/.singularity.d/actions/run", "other") == "other\n"
    assert chroot(unpacked, "/.singularity.d/actions/exec", "/bin/echo", "x") == "x\n"


def test_cli_writes_artifacts_and_edf(feature_image: str, tmp_path: Path,  # type: ignore[no-untyped-def]
                                      capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "project"
    project.mkdir()
    code = cli.main(["-C", str(project), "squash", feature_image, "--formats", "sqsh,sif",
                     "--site", "cscs-beverin", "--rocm-version", "6.4.4",
                     "--backend", "docker"])
    assert code == 0
    printed = capsys.readouterr().out.splitlines()
    name = "imagebuild-test+squash+features"
    artifacts = project / "artifacts"
    assert sorted(p.name for p in artifacts.iterdir()) == sorted(
        [f"{name}.sqsh", f"{name}.sqsh.sha256", f"{name}.sif", f"{name}.sif.sha256",
         f"{name}.toml"])
    subprocess.run(["sha256sum", "--quiet", "-c", f"{name}.sqsh.sha256", f"{name}.sif.sha256"],
                   cwd=artifacts, check=True)
    assert printed[0].startswith(f"sqsh  {artifacts / name}.sqsh  ")
    assert printed[1].startswith(f"sif   {artifacts / name}.sif  ")
    # beside the artifact (it records the image's sha256); envs/ is `imagebuild render`'s
    assert not (project / "envs").exists()
    edf = tomllib.loads((artifacts / f"{name}.toml").read_text())
    assert edf["image"] == f"${{SCRATCH}}/imagebuild/{name}.sqsh"
    # The site's workdir (the job's submit directory, as CSCS's PyTorch EDF sets it) wins
    # over the image's WORKDIR (/workspace here), so reports land on the cluster's storage.
    assert edf["workdir"] == "${PWD}"
    # Beverin uses the image's own RCCL plugin (network.plugin: image): the CXI hook brings the
    # host's libfabric, the aws_ofi_nccl hook stays off even for ROCm 6.
    assert edf["annotations"]["com"]["hooks"] == {"cxi": {"enabled": "true"}}
    assert edf["env"]["FI_PROVIDER"] == "cxi"


def test_cli_error_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],  # type: ignore[no-untyped-def]
                               docker_engine) -> None:
    code = cli.main(["-C", str(tmp_path), "squash", "imagebuild-test/none:missing",
                     "--backend", "docker"])
    assert code == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["error: docker: no image 'imagebuild-test/none:missing' here",
                   ("hint: pull it first (docker pull imagebuild-test/none:missing), or name "
                    "a recipe, a .sqsh or a .sif")]
    assert not (tmp_path / "artifacts").exists() or not any((tmp_path / "artifacts").iterdir())


def test_recipe_name_resolves_to_its_image(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    shutil.copytree(repo / "recipes", tmp_path / "recipes")
    target = resolve_target("rocm-7.0.2", tmp_path)
    assert (target.image_ref, target.name, target.rocm_version) == \
        ("imagebuild/rocm-7.0.2:latest", "rocm-7.0.2", "7.0.2")
    other = resolve_target("registry.example/ns/img:1.0", tmp_path)
    assert (other.image_ref, other.name, other.recipe) == \
        ("registry.example/ns/img:1.0", "registry.example+ns+img+1.0", None)


@pytest.mark.slow
def test_podman_export(podman_engine, podman_base_image: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source = podman_engine.image_source(podman_base_image)
    result = squash_image(source, tmp_path / "p.sqsh")
    members = read_squashfs(result.artifact.path)
    assert "run/.containerenv" not in members
    assert members["usr/bin/python3"].type in ("symlink", "file")
    # podman leaves the build host's name and nameservers where docker leaves empty files
    assert all(members[name].type == "file" and members[name].size == 0 for name in HOST_FILES)
    assert cat(result.artifact.path, "/etc/environment").decode().splitlines() == \
        list(source.config().env)
