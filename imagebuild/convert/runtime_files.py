"""The files a site runtime expects inside the image, written into the rootfs stream.

So a .sqsh behaves as if imported by ``enroot import dockerd://``, and ``apptainer run`` of
the .sqsh or the .sif works as for an Apptainer-built image:

- /etc/environment, /etc/rc, /etc/rc.local, /etc/fstab: enroot's formats, from
  NVIDIA/enroot src/docker.sh ``docker::configure``;
- /.singularity.d: Apptainer's layout, following apptainer/apptainer
  internal/pkg/build/sources: conveyorPacker_oci.go (insertEnv, insertRunScript,
  insertOCILabels) and base_environment.go (directories, action scripts, env/ scripts,
  symlinks).
"""

from __future__ import annotations

import json
import os
import re

from imagebuild.convert.sources import ImageConfig
from imagebuild.convert.tarfilter import RootfsEntry

# --- enroot -----------------------------------------------------------------------------------

def _sh_single_quote(word: str) -> str:
    """Quote like bash's ${var@Q} for printable text: 'it'\\''s'."""
    return "'" + word.replace("'", "'\\''") + "'"


def _sh_double_quote_body(text: str) -> str:
    return re.sub(r'([\\"`$])', r"\\\1", text)


#: A value enroot would change when reading /etc/environment back: its runtime strips one
#: quote character from each end (src/common.sh ``common::envfmt``).
_ENROOT_STRIPS_QUOTES = re.compile(r"""^["'].*["'][ \t\n\r\f\v]*$""", re.DOTALL)


def enroot_env_item(item: str) -> str:
    """``KEY=value`` as enroot must read it (in /etc/environment or ``start --env``) for
    the container to see ``value``."""
    key, sep, value = item.partition("=")
    if sep and _ENROOT_STRIPS_QUOTES.match(value):
        # One more pair of quotes, which envfmt strips again: the container sees the value.
        return f'{key}="{value}"'
    return item


def enroot_environment(config: ImageConfig) -> str:
    """/etc/environment: one ``KEY=value`` line per image ENV, unquoted, as enroot writes it
    (``jq -r '.config.Env[]'``) and as its runtime reads it back.

    Unlike enroot's own import, a value that starts and ends with a quote gets one more
    pair, so that the container sees it as docker does. ``${NAME}`` in a value cannot be
    protected: enroot replaces it with the host's $NAME when the container starts
    (``common::envsubst``, no escape); recipes refuse such values.
    """
    return "".join(f"{enroot_env_item(item)}\n" for item in config.env)


def enroot_fstab(config: ImageConfig) -> str:
    """/etc/fstab: each image VOLUME as a bind mount of the rootfs onto itself (enroot)."""
    return "".join(f"${{ENROOT_ROOTFS}}{volume} {volume} none "
                   "x-create=dir,bind,rw,nosuid,nodev\n" for volume in config.volumes)


def enroot_rc(config: ImageConfig) -> str:
    """/etc/rc: labels as comments, cd to WORKDIR, source rc.local, exec ENTRYPOINT+CMD.

    Same structure as enroot's docker::configure; two hardenings: newlines in label values
    become spaces (in enroot a multi-line label turns its tail into code), and WORKDIR is
    escaped for its double quotes.
    """
    lines = [f"# {key} {value}".replace("\r", " ").replace("\n", " ")
             for key, value in config.labels]
    if lines:
        lines.append("")
    workdir = _sh_double_quote_body(config.workdir or "/")
    entrypoint = " ".join(_sh_single_quote(w) for w in config.entrypoint)
    cmd = list(config.cmd)
    if not config.entrypoint and not cmd:
        cmd = ["/bin/sh"]
    default = " ".join(_sh_single_quote(w) for w in [*config.entrypoint, *cmd])
    with_args = " ".join(filter(None, [entrypoint, '"$@"']))
    lines += [
        f'mkdir -p "{workdir}" 2> /dev/null',
        f'cd "{workdir}" && unset OLDPWD || exit 1',
        "",
        "if [ -s /etc/rc.local ]; then",
        "    . /etc/rc.local",
        "fi",
        "",
        "if [ $# -gt 0 ]; then",
        f"    exec {with_args}",
        "else",
        f"    exec {default}",
        "fi",
    ]
    return "\n".join(lines) + "\n"


_RC_LOCAL = ("# This file is sourced by /etc/rc when the container starts.\n"
             "# It can be used to manipulate the entrypoint or the command of the container.\n")


def enroot_entries(config: ImageConfig) -> list[RootfsEntry]:
    entries = [
        RootfsEntry("etc", "dir", mode=0o755),
        RootfsEntry("etc/environment", data=enroot_environment(config).encode()),
        RootfsEntry("etc/fstab", data=enroot_fstab(config).encode()),
        RootfsEntry("etc/rc", data=enroot_rc(config).encode()),
        RootfsEntry("etc/rc.local", data=_RC_LOCAL.encode()),
    ]
    workdir = (config.workdir or "/").strip("/")
    if workdir:  # enroot: mkdir -p "${rootfs}${workdir}"
        entries.append(RootfsEntry(os.path.normpath(workdir), "dir", mode=0o755))
    return entries




# --- Apptainer: /.singularity.d -------------------------------------------------------------

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


def runtime_entries(config: ImageConfig) -> list[RootfsEntry]:
    """Everything written into the rootfs: enroot's files and Apptainer's /.singularity.d."""
    return [*enroot_entries(config), *apptainer_entries(config)]
