"""The runtime files written into the rootfs: enroot's /etc files and Apptainer's
/.singularity.d, checked for format and, where they are shell, by running them with sh."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from imagebuild.convert.runtime_files import (
    docker_env_script,
    enroot_entries,
    enroot_environment,
    enroot_fstab,
    enroot_rc,
    labels_json,
    runscript,
)
from imagebuild.convert.sources import ImageConfig, TarballSource
from imagebuild.convert.squashfs import squash_image
from imagebuild.convert.tarfilter import HOST_FILES, filter_rootfs_tar
from tests.convert.conftest import CONFIG, Crafted
from tests.support.squashfs import Member, cat, members_of_tar, read_squashfs


def sh(script: str, *args: str, cwd: Path | None = None,
       env: dict[str, str] | None = None) -> str:
    return subprocess.run(["sh", "-c", script, "sh", *args], check=True, capture_output=True,
                          text=True, cwd=cwd, env=env).stdout


# --- enroot -----------------------------------------------------------------------------------

def test_environment_is_one_line_per_env() -> None:
    assert enroot_environment(CONFIG) == (
        "PATH=/usr/local/bin:/usr/bin:/bin\nGREETING=hello world\n"
        'TRICKY=a"b$c`d\\e\nEMPTY=\n')
    assert enroot_environment(ImageConfig()) == ""


def test_environment_quotes_values_enroot_would_unquote() -> None:
    """enroot strips one quote from each end of a value that starts and ends with one
    (common::envfmt): such values get one more pair, nothing else is quoted."""
    config = ImageConfig(env=('A="x"', "B='y' ", "C=\"it's'", 'D=say "hi"', "E='",
                              'F="a" and "b"'))
    assert enroot_environment(config).splitlines() == [
        'A=""x""', "B=\"'y' \"", "C=\"\"it's'\"", 'D=say "hi"', "E='",
        'F=""a" and "b""']


def test_fstab_binds_each_volume() -> None:
    assert enroot_fstab(CONFIG) == (
        "${ENROOT_ROOTFS}/data /data none x-create=dir,bind,rw,nosuid,nodev\n"
        "${ENROOT_ROOTFS}/scratch /scratch none x-create=dir,bind,rw,nosuid,nodev\n")


def test_rc_starts_with_labels_as_comments() -> None:
    lines = enroot_rc(CONFIG).splitlines()
    assert lines[:3] == ["# org.opencontainers.image.title test image", "# rocm 7.0.2", ""]


def test_rc_multiline_label_stays_a_comment() -> None:
    rc = enroot_rc(ImageConfig(labels=(("evil", "x\nrm -rf /"),)))
    assert rc.splitlines()[0] == "# evil x rm -rf /"
    assert "\nrm -rf" not in rc


def _rc_run(config: ImageConfig, tmp_path: Path, *args: str) -> tuple[str, str]:
    """Run /etc/rc as enroot does (sh, with the container's args); entrypoint is printf."""
    workdir = tmp_path / "work dir"
    rc = enroot_rc(ImageConfig(workdir=str(workdir), entrypoint=config.entrypoint,
                               cmd=config.cmd))
    # rc sources /etc/rc.local only when non-empty; on a host it may exist: neutralize.
    rc = rc.replace("/etc/rc.local", str(tmp_path / "rc.local"))
    out = sh(rc + "", *args)
    return out, str(workdir)


def test_rc_runs_entrypoint_with_cmd_in_workdir(tmp_path: Path) -> None:
    config = ImageConfig(entrypoint=("sh", "-c", 'printf "%s|" "$PWD" "$@"', "ep"),
                         cmd=("a b", "it's"))
    out, workdir = _rc_run(config, tmp_path)
    assert out == f"{workdir}|a b|it's|"
    assert Path(workdir).is_dir()  # mkdir -p WORKDIR


def test_rc_arguments_replace_cmd(tmp_path: Path) -> None:
    config = ImageConfig(entrypoint=("sh", "-c", 'printf "%s|" "$@"', "ep"), cmd=("default",))
    out, _ = _rc_run(config, tmp_path, "x", "y z")
    assert out == "x|y z|"


def test_rc_without_entrypoint_or_cmd_runs_sh(tmp_path: Path) -> None:
    rc = enroot_rc(ImageConfig(workdir=str(tmp_path)))
    assert "exec '/bin/sh'" in rc
    out, _ = _rc_run(ImageConfig(cmd=("echo", "cmd only")), tmp_path)
    assert out == "cmd only\n"


def test_workdir_directory_is_created_in_the_image() -> None:
    paths = {e.path: e for e in enroot_entries(CONFIG)}
    assert paths["workspace/run"].kind == "dir"


# --- apptainer --------------------------------------------------------------------------------

def test_docker_env_script_format() -> None:
    script = docker_env_script(CONFIG)
    assert script.splitlines() == [
        "#!/bin/sh",
        'export PATH="/usr/local/bin:/usr/bin:/bin"',
        'export GREETING="${GREETING:-"hello world"}"',
        'export TRICKY="${TRICKY:-"a\\"b\\$c\\`d\\\\e"}"',
        'export EMPTY="${EMPTY:-""}"',
    ]


def test_docker_env_script_values_when_sourced() -> None:
    script = docker_env_script(CONFIG)
    probe = script + '\nprintf "%s|" "$PATH" "$GREETING" "$TRICKY" "$EMPTY"'
    base = {"PATH": "/usr/bin:/bin"}
    assert sh(probe, env=base) == '/usr/local/bin:/usr/bin:/bin|hello world|a"b$c`d\\e||'
    # host values win over image defaults, except PATH which is set literally
    assert sh(probe, env={**base, "GREETING": "from host"}).split("|")[1] == "from host"


def test_runscript_entrypoint_cmd_and_args(tmp_path: Path) -> None:
    config = ImageConfig(entrypoint=("sh", "-c", 'printf "%s|" "$@"', "ep"),
                         cmd=("a b", "it's"))
    script = tmp_path / "runscript"
    script.write_text(runscript(config))
    assert subprocess.run(["sh", str(script)], capture_output=True, text=True,
                          check=True).stdout == "a b|it's|"
    assert subprocess.run(["sh", str(script), "x"], capture_output=True, text=True,
                          check=True).stdout == "x|"
    assert "OCI_ENTRYPOINT='\"sh\" \"-c\"" in runscript(config)


def test_labels_json_sorted_tab_indented() -> None:
    text = labels_json(CONFIG)
    assert json.loads(text) == dict(CONFIG.labels)
    assert text.splitlines()[1].startswith('\t"org.opencontainers.image.title"')
    assert labels_json(ImageConfig()) == "{}"


# --- the build host's files -------------------------------------------------------------------

def _filtered(tmp_path: Path, build: Callable[[tarfile.TarFile], None]) -> dict[str, Member]:
    source, out = tmp_path / "in.tar", tmp_path / "out.tar"
    with tarfile.open(source, "w", format=tarfile.PAX_FORMAT) as tar:
        build(tar)
    with open(source, "rb") as src, open(out, "wb") as dst:
        filter_rootfs_tar(src, dst, clamp_mtime=1_700_000_000)
    with open(out, "rb") as stream:
        return members_of_tar(stream)


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE,
         link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, len(data)
    info.mode, info.uid, info.gid, info.mtime = 0o600, 1000, 1000, 1_650_000_000
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def test_build_host_files_become_empty(tmp_path: Path) -> None:
    """A podman-built image carries the build host's name and nameservers: whatever the
    engine wrote, the output has empty root-owned files (what docker exports)."""
    def build(tar: tarfile.TarFile) -> None:
        _add(tar, "etc", kind=tarfile.DIRTYPE)
        _add(tar, "etc/hostname", b"buildhost.internal\n")
        _add(tar, "etc/hosts", b"10.1.2.3 buildhost.internal\n")
        _add(tar, "etc/hosts.orig", kind=tarfile.LNKTYPE, link="etc/hosts")
        _add(tar, "etc/resolv.conf", kind=tarfile.SYMTYPE,
             link="../run/systemd/resolve/stub-resolv.conf")
        _add(tar, "etc/keep", b"image data\n")

    members = _filtered(tmp_path, build)
    for name in HOST_FILES + ("etc/hosts.orig",):
        got = members[name]
        assert (got.type, got.size, got.mode, got.uid, got.gid, got.mtime) == \
            ("file", 0, 0o644, 0, 0, 1_700_000_000), name
    assert members["etc/keep"].data == b"image data\n"


def test_build_host_files_are_made_when_missing(tmp_path: Path) -> None:
    """Present in every output, so a runtime always finds its bind-mount targets."""
    members = _filtered(tmp_path, lambda tar: _add(tar, "opt", kind=tarfile.DIRTYPE))
    assert members["etc"].type == "dir" and members["etc"].mode == 0o755
    assert all(members[name].type == "file" and members[name].size == 0
               for name in HOST_FILES)


# --- inside a real squashfs -------------------------------------------------------------------

@pytest.mark.integration
def test_files_inside_the_squashfs(crafted: Crafted, tmp_path: Path) -> None:
    out = tmp_path / "image.sqsh"
    squash_image(TarballSource(crafted.path, CONFIG), out)
    members = read_squashfs(out)
    assert cat(out, "/etc/environment").decode() == enroot_environment(CONFIG)
    assert cat(out, "/etc/rc").decode() == enroot_rc(CONFIG)
    assert cat(out, "/etc/fstab").decode() == enroot_fstab(CONFIG)
    assert b"sourced by /etc/rc" in cat(out, "/etc/rc.local")
    assert members["workspace/run"].type == "dir"
    sd = ".singularity.d"
    for name in ("actions/exec", "actions/run", "actions/shell", "actions/start",
                 "actions/test", "env/01-base.sh", "env/10-docker2singularity.sh",
                 "env/90-environment.sh", "env/99-base.sh", "env/99-runtimevars.sh",
                 "runscript", "startscript"):
        assert members[f"{sd}/{name}"].mode == 0o755, name
    assert members[f"{sd}/labels.json"].mode == 0o644
    assert members[f"{sd}/libs"].type == "dir"
    assert members["singularity"].linkname == f"{sd}/runscript"
    assert members["environment"].linkname == f"{sd}/env/90-environment.sh"
    assert cat(out, f"/{sd}/env/10-docker2singularity.sh").decode() == docker_env_script(CONFIG)
    assert cat(out, f"/{sd}/runscript").decode() == runscript(CONFIG)
    # the image's own directories keep their metadata when a convention names them too
    assert members["tmp"].mode == 0o1777
