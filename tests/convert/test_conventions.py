"""The runtime files written into the rootfs: enroot's /etc files and Apptainer's
/.singularity.d, checked for format and, where they are shell, by running them with sh."""

from __future__ import annotations

import json
import subprocess
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
from tests.convert.conftest import CONFIG, Crafted
from tests.support.squashfs import cat, read_squashfs


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
