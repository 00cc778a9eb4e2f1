"""Strict grammars for every recipe value that reaches a Dockerfile or a shell.

Names, versions, git refs, gfx targets and keys have strict grammars,
and free text is refused when it could add a Dockerfile instruction or a shell command
(newlines, control characters, command substitution, unbalanced quotes). Each pattern is
written once here and used both by the validator and by the JSON Schema for editors, so the
two cannot drift. Patterns use the subset shared by Python ``re`` and ECMA-262.
"""

from __future__ import annotations

import re

from imagebuild.recipe.gpu_targets import KNOWN_GPU_TARGETS

ROCM_VERSION = r"^[0-9]+\.[0-9]+\.[0-9]+$"
PYTHON_VERSION = r"^3\.[0-9]{1,2}$"
# Debian/Ubuntu package name with an optional =version pin.
OS_PACKAGE = r"^[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+:~-]+)?$"
# PEP 503 normalized project name (the lock and the index use normalized names).
PROJECT_NAME = r"^[a-z0-9]+([._-][a-z0-9]+)*$"
# AMD GPU targets with optional feature flags: gfx90a, gfx942, gfx950, gfx90a:xnack+; only
# the processors LLVM knows (gpu_targets.py), so the JSON Schema refuses a typo too.
GFX_TARGET = rf"^({'|'.join(KNOWN_GPU_TARGETS)})(:(xnack|sramecc)[+-])*$"
# Variables the image sets itself (the venv, the plugin's library path, the manifest) are
# not a recipe's to override.
RESERVED_ENV = ("PATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "IMAGEBUILD_MANIFEST", "MEGATRON_LM_DIR")
ENV_KEY = r"^(?!(PATH|VIRTUAL_ENV|LD_LIBRARY_PATH|IMAGEBUILD_MANIFEST|MEGATRON_LM_DIR)$)[A-Za-z_][A-Za-z0-9_]*$"
# OCI annotation keys: reverse-DNS style.
# Labels under imagebuild.* and the base-image labels are written by the renderer.
LABEL_KEY = (r"^(?!imagebuild\.)(?!org\.opencontainers\.image\.base\.)"
             r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
# A git branch or tag (git check-ref-format, conservatively) or a full commit.
GIT_REF = r"^(?!.*\.\.)(?!.*/\.)(?!.*\.lock$)[A-Za-z0-9][A-Za-z0-9._/-]*[A-Za-z0-9]$"
REPOSITORY_URL = r"^(https?|ssh|git|file)://[A-Za-z0-9._~:/?#@!&+,;=%-]+$"
ARCHIVE_URL = r"^(https?|file)://[A-Za-z0-9._~:/?#@!&+,;=%{}-]+$"
# "{family}" is replaced by the GPU family of the targets (ROCm from wheels: one index each).
INDEX_URL = r"^((https?|file)://[A-Za-z0-9._~:/?#@!&+,;=%{}-]+|/[A-Za-z0-9._/+{}-]*)$"
# Relative, inside the repository: no ".." component can climb out of the checkout.
#: A lowercase hex sha256 digest.
SHA256 = r"^[0-9a-f]{64}$"
SUBDIR = r"^(?!(.*/)?\.\.(/|$))[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$"
# A TensileLite logic-file glob relative to the library's Logic directory, as install.sh's
# --logic-yaml-filter takes it (gfx942/*/*, gfx942/Equality/*): path components of letters,
# digits, ._- and the wildcards * and ?; no "..", no leading "/".
LOGIC_FILTER = r"^(?!(.*/)?\.\.(/|$))[A-Za-z0-9._*?-]+(/[A-Za-z0-9._*?-]+)*$"
# An absolute directory inside the image (no "..", no spaces, no shell metacharacters).
ABSOLUTE_DIR = r"^(?!(.*/)?\.\.(/|$))/[A-Za-z0-9._+-]*(/[A-Za-z0-9._+-]+)*$"
# The same with at most one whole component "*" (the newest release the node has).
RELEASE_DIR = r"^(?!(.*/)?\.\.(/|$))(?!(.*/)?\*/(.*/)?\*(/|$))/([A-Za-z0-9._+-]+|\*)?(/([A-Za-z0-9._+-]+|\*))*$"
# A site profile name (imagebuild/data/sites/<name>.yaml or a project's sites/<name>.yaml).
SITE_NAME = r"^[a-z0-9][a-z0-9._-]*$"
EXTENDS = r"^[A-Za-z0-9_][A-Za-z0-9._-]*$"
VERSION_TEXT = r"^[0-9][A-Za-z0-9.+_-]*$"
# docker/distribution reference grammar: [registry[:port]/]path[:tag][@digest].
IMAGE_REFERENCE = (
    r"^([A-Za-z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._-]+[a-z0-9]+)*(/[a-z0-9]+([._-]+[a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$"
)
# Free text (env values, labels, description): one line, no control characters, no
# command substitution, balanced quotes. `$VAR` stays allowed: the renderer escapes it.
SAFE_TEXT = r"^(?!.*\$\()[^\x00-\x1f\x7f`]*$"
BALANCED_DOUBLE_QUOTES = r'^[^"]*("[^"]*"[^"]*)*$'
BALANCED_SINGLE_QUOTES = r"^[^']*('[^']*'[^']*)*$"
SAFE_TEXT_PATTERNS = (SAFE_TEXT, BALANCED_DOUBLE_QUOTES, BALANCED_SINGLE_QUOTES)
# An env value must mean the same in every runtime, and "${" cannot: docker, podman and
# Apptainer keep ${NAME} literal (the renderer escapes "$"), while enroot, and so CSCS's
# Container Engine, replaces ${NAME} in the image's /etc/environment with the host's $NAME
# when a container starts (NVIDIA/enroot src/common.sh, common::envsubst; no escape
# exists). A bare $NAME is literal everywhere.
ENV_VALUE = r"^(?!.*\$\{)"


def matches(pattern: str, value: str) -> bool:
    return re.search(pattern, value) is not None


def text_problem(value: str) -> str | None:
    """Why a free-text value is unsafe, or None when it is fine."""
    if any(ch in value for ch in "\n\r"):
        return "must be a single line (a newline could start a new Dockerfile instruction)"
    if re.search(r"[\x00-\x1f\x7f]", value):
        return "must not contain control characters"
    if "$(" in value or "`" in value:
        return "must not contain command substitution ($(...) or backticks)"
    if not matches(BALANCED_DOUBLE_QUOTES, value) or not matches(BALANCED_SINGLE_QUOTES, value):
        return "has unbalanced quotes"
    return None
