"""How values reach a Dockerfile: ENV/LABEL values through ``dockerfile_quote``, shell words
through ``shell_quote``, and the site CA handed to every fetching step (one place)."""

from __future__ import annotations

import shlex

from imagebuild.errors import RenderError
from imagebuild.render.layout import SITE_CA

# Site CA (BuildKit secret `site-ca`, mounted with required=false): every fetching step
# points its tools at it when present, so builds behind a TLS-intercepting proxy work and
# builds without it are unchanged. The bundle is never copied into a layer.


def ca_env(*variables: str) -> str:
    """Shell that exports ``variables`` = the site CA bundle when the secret is mounted."""
    exports = " ".join(f"{name}={SITE_CA}" for name in variables)
    return f"if [ -s {SITE_CA} ]; then export {exports}; fi"


APT_CA_CONF = "/etc/apt/apt.conf.d/99imagebuild-site-ca"
APT_CA_ON = (f"if [ -s {SITE_CA} ]; then echo 'Acquire::https::CaInfo \"{SITE_CA}\";' "
              f"> {APT_CA_CONF}; fi")
APT_CA_OFF = f"rm -f {APT_CA_CONF}"


def dockerfile_quote(value: str) -> str:
    """A double-quoted ENV/LABEL value in which ``$``, ``\\`` and ``"`` are literal.

    The Dockerfile parser expands ``$VAR`` and ``${VAR}`` in ENV and LABEL and treats a
    backslash as its escape character; escaping all three leaves the value inert (checked
    against a real BuildKit by tests/render/test_docker_build.py). Newlines and control
    characters never get here: the recipe grammar refuses them at load.
    """
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise RenderError(f"value {value!r} contains a control character")
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def shell_quote(value: str) -> str:
    return shlex.quote(value)
