"""(Recipe, Lock) -> multi-stage Dockerfile text, and the build context it COPYs from.

The Dockerfile is the one rendered format (DESIGN principle 2). Stages, in order:

    base       FROM the base image pinned by digest (tag when unlocked); nothing else
    toolchain  base + compilers, autotools, ROCm development packages (build stages only)
    hipblaslt  toolchain + hipBLASLt from source at the locked commit, recipe GPU targets
    plugin     toolchain + libfabric (locked archive, sha256) + aws-ofi-nccl / aws-ofi-rccl
    python     base + uv (pinned wheel, sha256) + /opt/venv from the lock, hashes required
    final      base + runtime OS packages + COPY --from the stages above + manifest, checks,
               ENV, LABEL (the volatile, cheap steps last)

Each stage only sees the recipe values it needs, so BuildKit rebuilds only what a change
touches; tests/render/test_cache.py proves it over the rendered stage graph. Recipe values
reach a shell only through ``shlex.quote`` and reach ENV/LABEL only through
``dockerfile_quote``; lock values are checked against strict formats first (a lock is a
file too, and could be edited by hand).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import tomli_w

from imagebuild import __version__, grammar
from imagebuild.errors import LockError, RenderError
from imagebuild.generated import GeneratedFile, Input, header
from imagebuild.lockfile import lock_path, read_lock
from imagebuild.model import Lock, Recipe
from imagebuild.recipe import project_dir

# --- what the image carries besides the build outputs: adjust here -------------------------

#: The in-image validation checks (standard library + torch only): copied from this source
#: directory into the image under IMAGE_CHECKS_DIR/CHECKS_IMPORT_NAME.
CHECKS_SOURCE = Path(__file__).resolve().parent / "validate" / "checks"
CHECKS_IMPORT_NAME = "imagebuild_checks"
#: Everything imagebuild puts into an image that is not a build output lives here.
IMAGE_ROOT = "/opt/imagebuild"
IMAGE_CHECKS_DIR = f"{IMAGE_ROOT}/checks"
IMAGE_MANIFEST = f"{IMAGE_ROOT}/manifest.json"
#: `imagebuild` inside the image: the checks with the image's own Python, so
#: `imagebuild validate ...` works in the image with only torch installed.
SHIM_PATH = "/usr/local/bin/imagebuild"
SHIM_COMMAND = (f'PYTHONPATH="{IMAGE_CHECKS_DIR}${{PYTHONPATH:+:$PYTHONPATH}}" '
                f'exec /opt/venv/bin/python -m {CHECKS_IMPORT_NAME} "$@"')

# --- pinned tools -------------------------------------------------------------------------

#: uv installs the venv from the lock (PEP 751 pylock.toml, hashes verified). It comes from
#: its PyPI wheel, pinned here by URL and sha256 per architecture (PyPI JSON API, uv 0.13.9);
#: the same version as the uv that writes the locks (pyproject: uv>=0.8).
UV_VERSION = "0.13.9"
UV_WHEELS: tuple[tuple[str, str, str], ...] = (
    ("x86_64",
     ("https://files.pythonhosted.org/packages/3d/aa/26d64642d808de4a652579ef950d7cd2d37f080a8babf9"
      "c67c6b75fc4c3f/uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"),
     "d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19"),
    ("aarch64",
     ("https://files.pythonhosted.org/packages/57/15/94b6cd62ac3ff6550288328e8035288875197cbc183f51"
      "554b266a69877b/uv-0.13.9-py3-none-manylinux_2_17_aarch64.manylinux2014_aarch64.musllinux_1_1"
      "_aarch64.whl"),
     "5435c5ce14a56431208ca0996416d310f1598e8c2c8ba707688985a16bb82dbe"),
)

# --- build-stage inputs that are not recipe values ------------------------------------------

#: Tools the source builds need on top of the base image. Debian/Ubuntu names.
TOOLCHAIN_PACKAGES = (
    "autoconf", "automake", "bzip2", "ca-certificates", "ccache", "cmake", "curl", "file",
    "g++", "gcc", "gfortran", "git", "libhwloc-dev", "libmsgpack-dev", "libnuma-dev",
    "libtool", "make", "patch", "pkg-config", "python3-venv", "python3-yaml", "wget",
    "xz-utils",
)
#: ROCm development packages the builds compile against (hipcc, HIP and RCCL headers,
#: rocm-cmake). Already present in rocm/dev-*-complete images (then apt does nothing);
#: named so a plain rocm/dev-* base works too. From the base image's ROCm apt repository.
ROCM_BUILD_PACKAGES = ("rccl-dev", "rocm-dev")
#: Shared libraries the plugin links besides libfabric (aws-ofi-nccl requires hwloc).
PLUGIN_RUNTIME_PACKAGES = ("libhwloc15",)
#: Runtime libraries of hipBLASLt's clients (install.sh builds them with gfortran/LAPACK).
HIPBLASLT_CLIENT_RUNTIME_PACKAGES = ("libgfortran5",)

#: Environment variables the final stage sets itself; a recipe may not override them.
RESERVED_ENV = grammar.RESERVED_ENV
#: Label prefix imagebuild owns.
LABEL_NAMESPACE = "imagebuild."

VENV = "/opt/venv"
HIPBLASLT_PREFIX = "/opt/hipblaslt"
LIBFABRIC_PREFIX = "/opt/libfabric"
SITE_CA = "/run/secrets/site-ca"

_TEMPLATES = Path(__file__).resolve().parent / "templates"

# Site CA (BuildKit secret `site-ca`, mounted with required=false): every fetching step
# points its tools at it when present, so builds behind a TLS-intercepting proxy work and
# builds without it are unchanged. The bundle is never copied into a layer.


def _ca_env(*variables: str) -> str:
    """Shell that exports ``variables`` = the site CA bundle when the secret is mounted."""
    exports = " ".join(f"{name}={SITE_CA}" for name in variables)
    return f"if [ -s {SITE_CA} ]; then export {exports}; fi"


_APT_CA_CONF = "/etc/apt/apt.conf.d/99imagebuild-site-ca"
_APT_CA_ON = (f"if [ -s {SITE_CA} ]; then echo 'Acquire::https::CaInfo \"{SITE_CA}\";' "
              f"> {_APT_CA_CONF}; fi")
_APT_CA_OFF = f"rm -f {_APT_CA_CONF}"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


# --- quoting ------------------------------------------------------------------------------

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


# --- public API ---------------------------------------------------------------------------

def render_dockerfile(recipe: Recipe, lock: Lock | None) -> str:
    """The Dockerfile for ``recipe``; unlocked (``lock=None``) renders for review only."""
    if lock is not None:
        check_lock(recipe, lock)
    _check_recipe(recipe)
    context = _template_context(recipe, lock)
    text = _environment().get_template("Dockerfile.j2").render(**context)
    return _tidy(text)


def stage_plan(recipe: Recipe) -> list[tuple[str, str, str]]:
    """(stage, what it holds, the inputs whose change rebuilds it), in Dockerfile order.

    The same facts tests/render/test_cache.py proves over the rendered stage graph.
    """
    plan = [("base", "FROM the pinned base image, nothing added", "base image digest")]
    if recipe.hipblaslt.enabled or recipe.network_plugin.enabled:
        plan.append(("toolchain", "base + compilers, ROCm development packages",
                     "base image"))
    if recipe.hipblaslt.enabled:
        plan.append(("hipblaslt", "toolchain + hipBLASLt build + tuning kit",
                     "hipBLASLt repository/commit, GPU targets (source layer: commit only)"))
    if recipe.network_plugin.enabled:
        plan.append(("plugin", f"toolchain + libfabric + {recipe.network_plugin.kind}",
                     "libfabric archive, plugin repository/commit"))
    plan.append(("python", "base + uv + /opt/venv from the lock",
                 "wheel pins (the lock's wheels), Python version"))
    plan.append(("final", "base + runtime packages + the stages' installs",
                 "os_packages, env, labels; re-copies any rebuilt stage"))
    return plan


def dockerfile_path(recipe: Recipe, project: Path | None = None) -> Path:
    return (project or project_dir()) / "dockerfiles" / recipe.name / "Dockerfile"


def current_lock(recipe: Recipe) -> Lock | None:
    """The recipe's lock, None when it was never locked; LockError when it is stale."""
    path = lock_path(recipe)
    if not path.exists():
        return None
    lock = read_lock(path)
    check_lock(recipe, lock)
    return lock


def generated_dockerfile(recipe: Recipe, project: Path | None = None) -> GeneratedFile:
    """dockerfiles/<recipe>/Dockerfile as it should be committed now."""
    return GeneratedFile(dockerfile_path(recipe, project),
                         render_dockerfile(recipe, current_lock(recipe)),
                         command=f"imagebuild render {recipe.name}")


def check_lock(recipe: Recipe, lock: Lock) -> None:
    """The lock belongs to this recipe, is current, and every pin has its strict format."""
    where = _display(lock.path)
    if lock.recipe != recipe.name:
        raise LockError(f"{where}: lock is for recipe {lock.recipe!r}, not {recipe.name!r}")
    if lock.input_hash != recipe.lock_input_hash():
        raise LockError(f"{where}: stale (recipe {recipe.name} changed since it was locked); "
                        f"run `imagebuild lock {recipe.name}`")
    if not _DIGEST.match(lock.base_digest):
        raise LockError(f"{where}: base-digest {lock.base_digest!r} is not sha256:<64 hex>")
    for wheel in lock.wheels:
        if not _SHA256.match(wheel.sha256):
            raise LockError(f"{where}: {wheel.name}: sha256 {wheel.sha256!r} is not 64 hex")
        if not wheel.url.startswith(("https://", "http://", "file://")):
            raise LockError(f"{where}: {wheel.name}: url {wheel.url!r} is not http(s)/file")
    for key, git, enabled in (("hipblaslt", lock.hipblaslt, recipe.hipblaslt.enabled),
                              ("network-plugin", lock.network_plugin,
                               recipe.network_plugin.enabled)):
        if not enabled:
            continue
        if git is None:
            raise LockError(f"{where}: [tool.imagebuild.sources.{key}] missing; "
                            f"run `imagebuild lock {recipe.name}`")
        if not _COMMIT.match(git.commit):
            raise LockError(f"{where}: {key} commit {git.commit!r} is not 40 hex")
    if recipe.network_plugin.enabled:
        archive = lock.libfabric
        if archive is None:
            raise LockError(f"{where}: [tool.imagebuild.sources.libfabric] missing; "
                            f"run `imagebuild lock {recipe.name}`")
        if not _SHA256.match(archive.sha256):
            raise LockError(f"{where}: libfabric sha256 {archive.sha256!r} is not 64 hex")
        if not grammar.matches(grammar.ARCHIVE_URL, archive.url):
            raise LockError(f"{where}: libfabric url {archive.url!r} is not an http(s) URL")


# --- build context ------------------------------------------------------------------------

#: File in a staged context directory that marks it as ours (safe to clear and restage).
CONTEXT_MARKER = ".imagebuild-context"


@dataclass(frozen=True)
class BuildContext:
    """A staged build context: the Dockerfile and every file it COPYs or mounts."""

    directory: Path
    dockerfile: Path
    #: Context-relative paths of the staged files, sorted.
    files: tuple[str, ...]


def build_context(recipe: Recipe, lock: Lock | None, dest_dir: Path,
                  checks_source: Path | None = None) -> BuildContext:
    """Stage the Dockerfile and everything it uses from its context into ``dest_dir``.

    Refuses an unlocked recipe: the build installs only what a lock pins. ``dest_dir``
    must be missing, empty, or a context staged here before (it is then cleared).
    """
    if lock is None:
        raise LockError(f"{recipe.name}: not locked; run `imagebuild lock {recipe.name}` "
                        "first (an image installs only what its lock pins)")
    dockerfile = render_dockerfile(recipe, lock)
    checks = checks_source or CHECKS_SOURCE
    if not (checks / "__main__.py").is_file():
        raise RenderError(f"in-image checks not found: {checks}/__main__.py (the image "
                          "carries them so `imagebuild validate` runs inside it)")
    _prepare_directory(dest_dir)
    (dest_dir / CONTEXT_MARKER).write_text(f"imagebuild {__version__} {recipe.name}\n")
    files: dict[str, str] = {
        "Dockerfile": dockerfile,
        "pylock.toml": python_lock(lock),
        "manifest.json": json.dumps(manifest(recipe, lock), indent=2) + "\n",
        "fetch-uv.py": (_TEMPLATES / "fetch-uv.py").read_text(),
        "bin/imagebuild": _shim(),
    }
    if recipe.hipblaslt.enabled:
        files["hipblaslt-tuning-kit.sh"] = (_TEMPLATES / "hipblaslt-tuning-kit.sh").read_text()
    for name, text in files.items():
        path = dest_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        path.chmod(0o755 if name.startswith("bin/") else 0o644)
    target = dest_dir / "checks" / CHECKS_IMPORT_NAME
    shutil.copytree(checks, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    # Modes from the checkout (umask) would otherwise leak into the layer and its cache key.
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    staged = sorted(str(p.relative_to(dest_dir)) for p in dest_dir.rglob("*")
                    if p.is_file() and p.name != CONTEXT_MARKER)
    return BuildContext(dest_dir, dest_dir / "Dockerfile", tuple(staged))


def _prepare_directory(directory: Path) -> None:
    """Make ``directory`` an empty context; only ever clears one staged here before."""
    if directory.exists():
        if not directory.is_dir():
            raise RenderError(f"{directory}: exists and is not a directory")
        entries = list(directory.iterdir())
        if entries and not (directory / CONTEXT_MARKER).is_file():
            raise RenderError(f"{directory}: not empty and not a build context staged by "
                              "imagebuild; refusing to clear it")
        for entry in entries:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    directory.mkdir(parents=True, exist_ok=True)


def python_lock(lock: Lock) -> str:
    """The Python part of the lock as a standalone PEP 751 file for the python stage.

    Only wheels: a change to a git commit or the base digest leaves this file, and so the
    python stage's cache, untouched.
    """
    packages = []
    for wheel in lock.wheels:
        entry: dict[str, Any] = {"url": wheel.url, "hashes": {"sha256": wheel.sha256}}
        if wheel.size is not None:
            entry["size"] = wheel.size
        packages.append({"name": wheel.name, "version": wheel.version, "wheels": [entry]})
    document = {
        "lock-version": "1.0",
        "created-by": "imagebuild",
        "requires-python": f"=={lock.python}.*",
        "packages": packages,
    }
    return (f"# The wheels of {_display(lock.path)}, staged by imagebuild for the python "
            "stage.\n" + tomli_w.dumps(document))


def manifest(recipe: Recipe, lock: Lock) -> dict[str, Any]:
    """What /opt/imagebuild/manifest.json records: every pinned version and commit.

    Keys read by the in-image checks (imagebuild/validate/checks/manifest.py): recipe,
    input_hash, rocm_version, python_version, wheels, gpu_targets, hipblaslt{enabled,
    commit, bench}, network_plugin{enabled, kind, library}. No timestamps: the same inputs
    give the same bytes (and the same layer).
    """
    plugin = recipe.network_plugin
    hip = recipe.hipblaslt
    data: dict[str, Any] = {
        "schema": 1,
        "generator": f"imagebuild {__version__}",
        "recipe": recipe.name,
        "input_hash": recipe.input_hash(),
        "lock": {"file": _display(lock.path), "sha256": lock.file_hash(),
                 "input_hash": lock.input_hash},
        "rocm_version": recipe.rocm,
        "python_version": recipe.python,
        "base_image": {"reference": recipe.base_image, "digest": lock.base_digest,
                       "pinned": lock.base_image_pinned},
        "gpu_targets": list(recipe.gpu_targets),
        "venv": VENV,
        "wheels": {w.name: w.version for w in lock.wheels},
        "wheel_files": [{"name": w.name, "version": w.version, "url": w.url,
                         "sha256": w.sha256, "size": w.size} for w in lock.wheels],
        "tools": {"uv": {"version": UV_VERSION, "path": "/usr/local/bin/uv",
                         "wheels": {arch: {"url": url, "sha256": sha}
                                    for arch, url, sha in UV_WHEELS}}},
        "hipblaslt": {"enabled": hip.enabled},
        "network_plugin": {"enabled": plugin.enabled},
    }
    if hip.enabled and lock.hipblaslt:
        data["hipblaslt"].update({
            "repository": lock.hipblaslt.repository, "ref": lock.hipblaslt.ref,
            "commit": lock.hipblaslt.commit, "subdir": hip.subdir,
            "gpu_targets": list(recipe.gpu_targets), "clients": hip.clients,
            "prefix": HIPBLASLT_PREFIX, "library": f"{HIPBLASLT_PREFIX}/lib",
            "bench": f"{HIPBLASLT_PREFIX}/bin/hipblaslt-bench" if hip.clients else None,
            "tuning_kit": _tuning_kit_paths() if hip.tuning_kit and hip.clients else None,
        })
    if plugin.enabled and lock.network_plugin and lock.libfabric:
        prefix = _plugin_prefix(recipe)
        data["network_plugin"].update({
            "kind": plugin.kind, "repository": lock.network_plugin.repository,
            "ref": lock.network_plugin.ref, "commit": lock.network_plugin.commit,
            "prefix": prefix, "library": f"{prefix}/lib/librccl-net.so",
            "libfabric": {"version": plugin.libfabric.version, "url": lock.libfabric.url,
                          "sha256": lock.libfabric.sha256, "prefix": LIBFABRIC_PREFIX},
        })
    return data


# --- rendering internals ------------------------------------------------------------------

def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["sh"] = shell_quote
    env.filters["dq"] = dockerfile_quote
    return env


def _tidy(text: str) -> str:
    """At most one blank line in a row, none at the end: stable output for diffs."""
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.rstrip("\n") + "\n"


def _check_recipe(recipe: Recipe) -> None:
    if ".." in recipe.hipblaslt.subdir.split("/"):
        raise RenderError(f"{_display(recipe.path)}: hipblaslt.subdir: "
                          f"{recipe.hipblaslt.subdir!r} leaves the checkout (no '..' parts)")
    for key, _ in recipe.env:
        if key in RESERVED_ENV:
            raise RenderError(f"{_display(recipe.path)}: env.{key}: set by imagebuild itself "
                              f"(reserved: {', '.join(RESERVED_ENV)})")
    for key, _ in recipe.labels:
        if key.startswith(LABEL_NAMESPACE) or key in _generated_oci_labels():
            raise RenderError(f"{_display(recipe.path)}: labels.{key}: set by imagebuild "
                              f"itself (it owns {LABEL_NAMESPACE}* and the base-image labels)")


def _generated_oci_labels() -> tuple[str, ...]:
    return ("org.opencontainers.image.base.name", "org.opencontainers.image.base.digest")


def _display(path: Path) -> str:
    """``recipes/rocm-7.0.2.yaml``: parent folder and name, the same on every checkout."""
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def _cache_scope(recipe: Recipe) -> str:
    """Cache-mount id suffix: the base image's repository, sanitised.

    apt lists and ccache are only shared between builds on the same distribution and
    compilers; every ROCm release of rocm/dev-ubuntu-24.04 shares one, a Debian test base
    gets its own.
    """
    repository = re.split(r"[@]", recipe.base_image)[0]
    name = repository.rsplit(":", 1)[0] if ":" in repository.rsplit("/", 1)[-1] else repository
    return re.sub(r"[^a-z0-9.-]+", "-", name.lower()).strip("-")


def _plugin_prefix(recipe: Recipe) -> str:
    return f"/opt/{recipe.network_plugin.kind}"


def _tuning_kit_paths() -> dict[str, str]:
    kit = f"{HIPBLASLT_PREFIX}/tuning"
    return {"root": kit, "find_exact": f"{kit}/utilities/find_exact.py",
            "build_dir": f"{kit}/build/release",
            "usage": f"python {kit}/utilities/find_exact.py CONFIG.yaml {kit}/build/release OUT"}


def _stage_lines(plan: list[tuple[str, str, str]]) -> list[str]:
    name_width = max(len(name) for name, _, _ in plan)
    what_width = max(len(what) for _, what, _ in plan)
    lines = [f"{'stage'.ljust(name_width)}  {'holds'.ljust(what_width)}  rebuilds when"]
    lines += [f"{name.ljust(name_width)}  {what.ljust(what_width)}  {inputs}"
              for name, what, inputs in plan]
    return [line.rstrip() for line in lines]


def _shim() -> str:
    return ("#!/bin/sh\n"
            "# imagebuild inside the image: the validation checks, run with the image's Python\n"
            "# (standard library + torch only). Staged by imagebuild's build context.\n"
            f"{SHIM_COMMAND}\n")


def _template_context(recipe: Recipe, lock: Lock | None) -> dict[str, Any]:
    locked = lock is not None
    scope = _cache_scope(recipe)
    hip = recipe.hipblaslt
    plugin = recipe.network_plugin
    builds = hip.enabled or plugin.enabled
    torch = recipe.wheels.version_of("torch") or "none"

    inputs = [Input(_display(recipe.path), recipe.input_hash(),
                    note="extends " + ", ".join(_display(p) for p in recipe.sources[1:])
                    if len(recipe.sources) > 1 else "")]
    if lock is not None:
        inputs.append(Input(_display(lock.path), lock.file_hash()))
    else:
        inputs.append(Input(_display(lock_path(recipe)), "UNLOCKED"))
    head = header(inputs, command=f"imagebuild render {recipe.name}")

    hipblaslt = None
    if hip.enabled:
        source = lock.hipblaslt if lock else None
        hipblaslt = {
            "repository": hip.source.repository,
            "revision": source.commit if source else hip.source.ref,
            "ref": hip.source.ref,
            "subdir": hip.subdir,
            "targets": ";".join(recipe.gpu_targets),
            "clients": hip.clients,
            "tuning_kit": hip.tuning_kit and hip.clients,
            "prefix": HIPBLASLT_PREFIX,
            "source_dir": "/usr/src/hipblaslt" + ("" if hip.subdir == "." else f"/{hip.subdir}"),
        }
    network = None
    if plugin.enabled:
        source = lock.network_plugin if lock else None
        archive = lock.libfabric if lock else None
        network = {
            "kind": plugin.kind,
            "repository": plugin.source.repository,
            "revision": source.commit if source else plugin.source.ref,
            "ref": plugin.source.ref,
            "prefix": _plugin_prefix(recipe),
            "libfabric_version": plugin.libfabric.version,
            "libfabric_url": archive.url if archive else plugin.libfabric.url,
            "libfabric_sha256": archive.sha256 if archive else None,
            "libfabric_prefix": LIBFABRIC_PREFIX,
        }

    library_path = []
    if hip.enabled:
        library_path.append(f"{HIPBLASLT_PREFIX}/lib")
    if plugin.enabled:
        library_path.append(f"{_plugin_prefix(recipe)}/lib")

    runtime_packages = list(recipe.os_packages)
    added = list(PLUGIN_RUNTIME_PACKAGES if plugin.enabled else ())
    added += HIPBLASLT_CLIENT_RUNTIME_PACKAGES if hip.enabled and hip.clients else ()
    runtime_packages += [p for p in added if p not in runtime_packages]

    labels = [(key, value) for key, value in recipe.labels]
    labels += [
        ("org.opencontainers.image.base.name", recipe.base_image.split("@", 1)[0]),
    ]
    if lock is not None:
        labels.append(("org.opencontainers.image.base.digest", lock.base_digest))
    labels += [
        ("imagebuild.recipe", recipe.name),
        ("imagebuild.input-hash", recipe.input_hash()),
        ("imagebuild.lock-hash", lock.file_hash() if lock else "UNLOCKED"),
        ("imagebuild.rocm", recipe.rocm or "none"),
        ("imagebuild.torch", torch),
        ("imagebuild.python", recipe.python),
        ("imagebuild.gpu-targets", ",".join(recipe.gpu_targets) or "none"),
        ("imagebuild.manifest", IMAGE_MANIFEST),
    ]

    linked_files = []
    if plugin.enabled:
        linked_files.append(f"{_plugin_prefix(recipe)}/lib/librccl-net.so")
    if hip.enabled:
        linked_files.append(f"{HIPBLASLT_PREFIX}/lib/libhipblaslt.so")
        if hip.clients:
            linked_files.append(f"{HIPBLASLT_PREFIX}/bin/hipblaslt-bench")

    uv_lines = []
    for arch, url, sha in UV_WHEELS:
        uv_lines += [f"{arch} {shell_quote(url)} \\", f"{sha} \\"]
    uv_lines[-1] = uv_lines[-1].removesuffix(" \\")

    return {
        "syntax": recipe.dockerfile_syntax,
        # COPY --link exists only in the docker/dockerfile:1.4+ frontends, not in the
        # engine's built-in one (Docker 20.10), which a null syntax selects.
        "link": "--link " if recipe.dockerfile_syntax else "",
        "header": head,
        "locked": locked,
        "recipe_name": recipe.name,
        "rocm": recipe.rocm,
        "stage_lines": _stage_lines(stage_plan(recipe)),
        "base_ref": lock.base_image_pinned if lock else recipe.base_image,
        "scope": scope,
        # Each fetching step points its tools at the site CA: uv and Python's urllib read
        # SSL_CERT_FILE, curl CURL_CA_BUNDLE, git GIT_SSL_CAINFO, pip PIP_CERT.
        "ca_python": _ca_env("SSL_CERT_FILE"),
        "ca_curl": _ca_env("CURL_CA_BUNDLE"),
        "ca_git": _ca_env("GIT_SSL_CAINFO"),
        "ca_all": _ca_env("SSL_CERT_FILE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT",
                          "REQUESTS_CA_BUNDLE"),
        "apt_ca_on": _APT_CA_ON,
        "apt_ca_off": _APT_CA_OFF,
        "builds": builds,
        "toolchain_packages": TOOLCHAIN_PACKAGES,
        "rocm_packages": ROCM_BUILD_PACKAGES if recipe.rocm else (),
        "hipblaslt": hipblaslt,
        "plugin": network,
        "added_packages": added,
        "python": recipe.python,
        "venv": VENV,
        "uv_version": UV_VERSION,
        "uv_lines": uv_lines,
        "runtime_packages": runtime_packages,
        "linked_files": linked_files,
        "library_path": ":".join(library_path),
        "env": list(recipe.env),
        "labels": labels,
        "checks_dir": IMAGE_CHECKS_DIR,
        "manifest_path": IMAGE_MANIFEST,
        "shim_path": SHIM_PATH,
    }
