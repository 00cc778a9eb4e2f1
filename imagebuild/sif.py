"""Apptainer's Singularity Image Format (.sif) from the built image.

Two ways, chosen by ``choose_method``:

- ``apptainer build x.sif docker-daemon://ref`` when Apptainer is installed (its own
  export and mksquashfs);
- otherwise Debian's ``siftool``, wrapping the squashfs that ``imagebuild.squash`` made:
  that squashfs already holds /.singularity.d as Apptainer writes it (``apptainer_entries``),
  so the partition is the very bytes of the .sqsh. ``siftool new`` + ``siftool add
  --datatype 4 --parttype 2 --partfs 1 --partarch <arch>`` (primary system partition,
  squashfs), then the image config as an ``oci-config.json`` generic-JSON object as
  Apptainer adds it, and the launch line ``#!/usr/bin/env run-singularity`` that siftool
  leaves out (so ``./x.sif`` runs like an Apptainer-built image).

The /.singularity.d formats follow apptainer/apptainer internal/pkg/build/sources:
conveyorPacker_oci.go (insertEnv, insertRunScript, insertOCILabels) and
base_environment.go (directories, action scripts, env/ scripts, symlinks).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

from imagebuild.artifacts import Artifact, publish, temporary_name
from imagebuild.errors import SquashError
from imagebuild.export import ImageConfig, RootfsEntry

#: SIF global header: the first 32 bytes are a launch script ("#!/usr/bin/env
#: run-singularity\n" in sylabs/sif OptCreateWithLaunchScript); siftool writes zeros.
LAUNCH_SCRIPT = b"#!/usr/bin/env run-singularity\n"
_LAUNCH_FIELD = 32
_SIF_MAGIC = b"SIF_MAGIC\0"

#: siftool --partarch numbers (siftool add --help) by OCI architecture name.
_PARTARCH = {"386": 1, "amd64": 2, "arm": 3, "arm64": 4, "ppc64": 5, "ppc64le": 6,
             "mips": 7, "mipsle": 8, "mips64": 9, "mips64le": 10, "s390x": 11, "riscv64": 12}


# --- /.singularity.d --------------------------------------------------------------------------

def _escape_double_quoted(value: str) -> str:
    """Apptainer's shell.Escape: backslash, double quote, backtick and dollar."""
    return re.sub(r'([\\"`$])', r"\\\1", value)


def docker_env_script(config: ImageConfig) -> str:
    """/.singularity.d/env/10-docker2singularity.sh: image ENV as defaults the host may
    override (``export VAR="${VAR:-"value"}"``), PATH set literally."""
    lines = ["#!/bin/sh"]
    for item in config.env:
        key, sep, value = item.partition("=")
        if not sep:
            lines.append(f'export {key}="${{{key}:-}}"')
        elif key == "PATH":
            lines.append(f'export PATH="{_escape_double_quoted(value)}"')
        else:
            lines.append(f'export {key}="${{{key}:-"{_escape_double_quoted(value)}"}}"')
    return "\n".join(lines) + "\n"


def _single_quoted(word: str) -> str:
    # Apptainer's shell.EscapeSingleQuotes inside '...'
    return "'" + word.replace("'", "'\"'\"'") + "'"


def runscript(config: ImageConfig) -> str:
    """/.singularity.d/runscript: run ENTRYPOINT with CMD as default arguments.

    Keeps Apptainer's OCI_ENTRYPOINT / OCI_CMD variables (``apptainer inspect`` shows
    them) and follows OCI semantics without re-evaluating words through the shell (what
    Apptainer does with SINGULARITY_NO_EVAL set): arguments given to ``run`` replace CMD.
    """
    def args_quoted(words: tuple[str, ...]) -> str:
        return " ".join(f'"{_escape_double_quoted(w)}"' for w in words)

    def prepend(words: tuple[str, ...], indent: str) -> list[str]:
        return [f'{indent}set -- {_single_quoted(w)} "$@"' for w in reversed(words)]

    lines = [
        "#!/bin/sh",
        "OCI_ENTRYPOINT=" + _single_quoted(args_quoted(config.entrypoint)),
        "OCI_CMD=" + _single_quoted(args_quoted(config.cmd)),
        "",
    ]
    default = config.cmd if (config.cmd or config.entrypoint) else ("/bin/sh",)
    if default:
        lines += ["if [ $# -eq 0 ]; then", *prepend(default, "    "), "fi"]
    lines += prepend(config.entrypoint, "")
    lines += ['exec "$@"']
    return "\n".join(lines) + "\n"


def labels_json(config: ImageConfig) -> str:
    """/.singularity.d/labels.json: tab-indented, keys sorted (Go's MarshalIndent)."""
    return json.dumps(dict(config.labels), indent="\t", sort_keys=True, ensure_ascii=False)


_SOURCE_ENV = """for script in /.singularity.d/env/*.sh; do
    if [ -f "$script" ]; then
        . "$script"
    fi
done
"""

_ACTIONS = {
    "exec": "#!/bin/sh\n\n" + _SOURCE_ENV + '\nexec "$@"\n',
    "run": "#!/bin/sh\n\n" + _SOURCE_ENV + """
if test -x /.singularity.d/runscript; then
    exec /.singularity.d/runscript "$@"
fi
echo "No runscript found, executing /bin/sh" >&2
exec /bin/sh "$@"
""",
    "shell": "#!/bin/sh\n\n" + _SOURCE_ENV + """
if test -n "${APPTAINER_SHELL:-}" && test -x "$APPTAINER_SHELL"; then
    exec "$APPTAINER_SHELL" "$@"
elif test -x /bin/bash; then
    SHELL=/bin/bash
    export SHELL
    exec /bin/bash --norc "$@"
fi
SHELL=/bin/sh
export SHELL
exec /bin/sh "$@"
""",
    "start": "#!/bin/sh\n\n# let PID 1 continue (instance start)\nkill -CONT 1\n\n" + _SOURCE_ENV
             + """
if test -x /.singularity.d/startscript; then
    exec /.singularity.d/startscript
fi
""",
    "test": "#!/bin/sh\n\n" + _SOURCE_ENV + """
if test -x /.singularity.d/test; then
    exec /.singularity.d/test "$@"
fi
echo "No test found in container, executing /bin/sh -c true" >&2
exec /bin/sh -c true
""",
}

_ENV_SCRIPTS = {
    "01-base.sh": "#!/bin/sh\n",
    "90-environment.sh": "#!/bin/sh\n# Custom environment shell code should follow\n\n",
    "99-base.sh": """#!/bin/sh
if [ -z "${LD_LIBRARY_PATH:-}" ]; then
    LD_LIBRARY_PATH="/.singularity.d/libs"
else
    LD_LIBRARY_PATH="$LD_LIBRARY_PATH:/.singularity.d/libs"
fi
PS1="Apptainer> "
export LD_LIBRARY_PATH PS1
""",
    # --env PATH handling of `apptainer exec` (SING_USER_DEFINED_* set by the runtime).
    "99-runtimevars.sh": """#!/bin/sh
if [ -n "${SING_USER_DEFINED_PREPEND_PATH:-}" ]; then
    PATH="${SING_USER_DEFINED_PREPEND_PATH}:${PATH}"
fi
if [ -n "${SING_USER_DEFINED_APPEND_PATH:-}" ]; then
    PATH="${PATH}:${SING_USER_DEFINED_APPEND_PATH}"
fi
if [ -n "${SING_USER_DEFINED_PATH:-}" ]; then
    PATH="${SING_USER_DEFINED_PATH}"
fi
unset SING_USER_DEFINED_PREPEND_PATH SING_USER_DEFINED_APPEND_PATH SING_USER_DEFINED_PATH
export PATH
""",
}


def apptainer_entries(config: ImageConfig) -> list[RootfsEntry]:
    """/.singularity.d as ``apptainer build`` from an OCI image writes it."""
    d = ".singularity.d"
    entries = [RootfsEntry(path, "dir", mode=0o755) for path in (
        d, f"{d}/actions", f"{d}/env", f"{d}/libs",
        # base_environment.go makeDirs: mount points apptainer expects to exist
        "dev", "proc", "sys", "tmp", "var/tmp", "root", "home", "etc")]
    entries += [RootfsEntry(f"{d}/actions/{name}", data=text.encode(), mode=0o755)
                for name, text in _ACTIONS.items()]
    entries += [RootfsEntry(f"{d}/env/{name}", data=text.encode(), mode=0o755)
                for name, text in _ENV_SCRIPTS.items()]
    entries += [
        RootfsEntry(f"{d}/env/10-docker2singularity.sh", data=docker_env_script(config).encode(),
                    mode=0o755),
        RootfsEntry(f"{d}/runscript", data=runscript(config).encode(), mode=0o755),
        RootfsEntry(f"{d}/startscript", data=b"#!/bin/sh\n", mode=0o755),
        RootfsEntry(f"{d}/labels.json", data=labels_json(config).encode(), mode=0o644),
        RootfsEntry("singularity", "symlink", target=f"{d}/runscript"),
        RootfsEntry(".run", "symlink", target=f"{d}/actions/run"),
        RootfsEntry(".exec", "symlink", target=f"{d}/actions/exec"),
        RootfsEntry(".shell", "symlink", target=f"{d}/actions/shell"),
        RootfsEntry(".test", "symlink", target=f"{d}/actions/test"),
        RootfsEntry("environment", "symlink", target=f"{d}/env/90-environment.sh"),
    ]
    return entries


# --- building the .sif ------------------------------------------------------------------------

def choose_method(method: str, image_ref: str | None,
                  which=shutil.which) -> str:  # type: ignore[no-untyped-def]
    """``auto``: apptainer when installed and the image is in a Docker engine, else siftool."""
    if method not in ("auto", "apptainer", "siftool"):
        raise SquashError(f"--sif-method: expected auto, apptainer or siftool, got {method!r}")
    if method == "apptainer" or (method == "auto" and image_ref and which("apptainer")):
        if not which("apptainer"):
            raise SquashError("sif: apptainer not found on PATH (use --sif-method siftool)")
        if not image_ref:
            raise SquashError("sif: apptainer builds from a Docker engine image reference")
        return "apptainer"
    if not which("siftool"):
        raise SquashError("sif: neither apptainer nor siftool found on PATH; install "
                          "Debian's siftool package or Apptainer")
    return "siftool"


def _run(argv: list[str], step: str) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise SquashError(f"sif: {step}: cannot run {argv[0]}: {exc.strerror}") from exc
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip()
        raise SquashError(f"sif: {step} failed (exit status {proc.returncode}); nothing was "
                          f"kept" + (f"\n{said}" if said else ""))
    return proc.stdout


def write_launch_script(sif_path: Path) -> None:
    with open(sif_path, "r+b") as stream:
        header = stream.read(_LAUNCH_FIELD + len(_SIF_MAGIC))
        if header[_LAUNCH_FIELD:] != _SIF_MAGIC:
            raise SquashError(f"sif: {sif_path.name}: no SIF magic at offset {_LAUNCH_FIELD}")
        if header[:_LAUNCH_FIELD].strip(b"\0"):
            return  # a launch script is there already
        stream.seek(0)
        stream.write(LAUNCH_SCRIPT.ljust(_LAUNCH_FIELD, b"\0"))


def wrap_squashfs(squashfs: Path, output: Path, config: ImageConfig, *,
                  image_ref: str | None = None, siftool: str = "siftool",
                  extra_seconds: float = 0.0) -> Artifact:
    """A .sif with ``squashfs`` as its primary system partition, published atomically.

    Objects in Apptainer's order (internal/pkg/build/assemblers/sif.go createSIF): the
    definition file, the JSON objects (oci-config.json), then the partition; all in object
    group 1, the default group of apptainer/sif v2.
    """
    started = time.monotonic()
    arch = _PARTARCH.get(config.architecture)
    if arch is None:
        raise SquashError(f"sif: image architecture {config.architecture!r} has no SIF code")
    temp = temporary_name(output)
    staged: list[Path] = []

    def stage(name: str, text: str) -> Path:
        path = temporary_name(output.with_name(name))
        staged.append(path)
        path.write_text(text, encoding="utf-8")
        return path

    try:
        _run([siftool, "new", str(temp)], "siftool new")
        write_launch_script(temp)
        if image_ref:
            deffile = stage("deffile", f"bootstrap: docker-daemon\nfrom: {image_ref}\n")
            _run([siftool, "add", "--datatype", "1", "--groupid", "1", "--filename", "deffile",
                  str(temp), str(deffile)], "siftool add (definition file)")
        if config.raw:
            # Apptainer keeps the image config as "oci-config.json" (SIFDescOCIConfigJSON).
            oci = stage("oci-config.json", json.dumps(dict(config.raw), sort_keys=True))
            _run([siftool, "add", "--datatype", "6", "--groupid", "1",
                  "--filename", "oci-config.json", str(temp), str(oci)],
                 "siftool add (oci-config.json)")
        _run([siftool, "add", "--datatype", "4", "--parttype", "2", "--partfs", "1",
              "--partarch", str(arch), "--groupid", "1", str(temp), str(squashfs)],
             "siftool add (primary system partition)")
        return publish(temp, output, "sif", time.monotonic() - started + extra_seconds)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    finally:
        for path in staged:
            path.unlink(missing_ok=True)


def apptainer_build(image_ref: str, output: Path, apptainer: str = "apptainer") -> Artifact:
    """``apptainer build`` from the Docker engine, published atomically."""
    started = time.monotonic()
    temp = temporary_name(output)
    try:
        _run([apptainer, "build", "--force", str(temp), f"docker-daemon://{image_ref}"],
             "apptainer build")
        return publish(temp, output, "sif", time.monotonic() - started)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
