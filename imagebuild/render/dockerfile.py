"""A build plan -> the multi-stage Dockerfile.

The Dockerfile is the one rendered format: squashfs and SIF are made from the built image,
never from a second renderer. Stages, in order:

    base       FROM the base image pinned by digest (tag when unlocked); nothing else
    toolchain  base + compilers, autotools, ROCm development packages (build stages only)
    hipblaslt  toolchain + hipBLASLt from source at the locked commit, recipe GPU targets
    plugin     toolchain + libfabric (locked archive, sha256) + aws-ofi-nccl / aws-ofi-rccl
    rccl-tests toolchain + ROCm/rccl-tests' *_perf benchmarks at the locked commit, built with
               hipcc for the recipe's GPU targets against the image's RCCL
    rccl-tuner toolchain + RCCL's example tuner plugin (archive, sha256), checked against the
               tuner interfaces the image's RCCL looks up
    python     base + uv (pinned wheel, sha256) + /opt/venv from the lock, hashes required
    megatron   toolchain + Megatron-LM at the locked commit, dataset helpers compiled against
               the venv (mounted from python)
    transformer-engine  toolchain + TransformerEngine's PyTorch extension built from its
               locked source archive against the venv, for the recipe's GPU targets
    final      base + runtime OS packages + COPY --from the stages above + manifest, checks,
               ENV, LABEL (the volatile, cheap steps last)

Each stage only sees the recipe values it needs, so BuildKit rebuilds only what a change
touches; tests/render/test_cache.py proves it over the rendered stage graph. Recipe values
reach a shell only through ``shlex.quote`` and reach ENV/LABEL only through
``dockerfile_quote``; lock values were checked against strict formats before the plan was made
(imagebuild.lock.check).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jinja2

from imagebuild.generated import GeneratedFile, Input, header
from imagebuild.lock.check import display
from imagebuild.lock.lockfile import lock_path
from imagebuild.recipe.load import project_dir
from imagebuild.recipe.model import Recipe
from imagebuild.recipe.rocm_layout import PACKAGED_PREFIX
from imagebuild.render.layout import (
    DEVICE_CODE_CHECK,
    DEVICE_CODE_REPORT,
    IMAGE_CHECKS_DIR,
    IMAGE_MANIFEST,
    ROCM_KERNEL_DIRS,
    SELECTOR_FILE,
    SHIM_PATH,
    TORCH_KERNEL_DIRS,
    UV_VERSION,
    UV_WHEELS,
    VENV,
)
from imagebuild.render.plan import (
    TUNER_CONFIG_CONTEXT,
    TUNER_CONFIG_ENV,
    TUNER_PLUGIN_ENV,
    BuildPlan,
    device_code_diet,
)
from imagebuild.render.quoting import APT_CA_OFF, APT_CA_ON, ca_env, dockerfile_quote, shell_quote

TEMPLATES = Path(__file__).resolve().parent / "templates"


def render_dockerfile(plan: BuildPlan) -> str:
    """The Dockerfile of ``plan``; an unlocked plan renders for review only."""
    text = _environment().get_template("Dockerfile.j2").render(**_template_context(plan))
    return _tidy(text)


def stage_plan(recipe: Recipe) -> list[tuple[str, str, str]]:
    """(stage, what it holds, the inputs whose change rebuilds it), in Dockerfile order.

    The same facts tests/render/test_cache.py proves over the rendered stage graph.
    """
    def on(name: str) -> bool:
        section = recipe.components.get(name)
        return section is not None and section.enabled

    plan = [("base", "FROM the pinned base image, nothing added", "base image digest")]
    if any(on(name) for name in recipe.components):
        plan.append(("toolchain", "base + compilers, ROCm development packages",
                     "base image"))
    if on("hipblaslt"):
        plan.append(("hipblaslt", "toolchain + hipBLASLt build + tuning kit",
                     "hipBLASLt repository/commit, GPU targets (source layer: commit only)"))
    if on("network_plugin"):
        kind = recipe.components["network_plugin"].kind  # type: ignore[attr-defined]
        plan.append(("plugin", f"toolchain + libfabric + {kind}",
                     "libfabric archive, plugin repository/commit"))
    if on("rccl_tests"):
        plan.append(("rccl-tests", "toolchain + rccl-tests' *_perf benchmarks",
                     "rccl-tests repository/commit, GPU targets"))
    if on("rccl_tuner"):
        plan.append(("rccl-tuner", "toolchain + RCCL's example tuner plugin and its probe",
                     "tuner archive (url, sha256), interface adapter"))
    plan.append(("python", "base + uv + /opt/venv from the lock",
                 "wheel pins (the lock's wheels), Python version"))
    if on("transformer_engine"):
        plan.append(("transformer-engine", "toolchain + TransformerEngine's torch extension",
                     "its locked source archive, the venv, GPU targets"))
    if on("megatron"):
        plan.append(("megatron", "toolchain + Megatron-LM, dataset helpers compiled",
                     "Megatron repository/commit, the venv"))
    plan.append(("final", "base + runtime packages + the stages' installs",
                 "os_packages, env, labels; re-copies any rebuilt stage"))
    return plan


def dockerfile_path(recipe: Recipe, project: Path | None = None) -> Path:
    return (project or project_dir()) / "dockerfiles" / recipe.name / "Dockerfile"


def generated_dockerfile(plan: BuildPlan, project: Path | None = None, *,
                         text: str | None = None) -> GeneratedFile:
    """dockerfiles/<recipe>/Dockerfile as it should be committed now (``text``: the plan's
    Dockerfile when the caller rendered it already)."""
    return GeneratedFile(dockerfile_path(plan.recipe, project),
                         render_dockerfile(plan) if text is None else text,
                         command=f"imagebuild render {plan.recipe.name}")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
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


def _stage_lines(plan: list[tuple[str, str, str]]) -> list[str]:
    name_width = max(len(name) for name, _, _ in plan)
    what_width = max(len(what) for _, what, _ in plan)
    lines = [f"{'stage'.ljust(name_width)}  {'holds'.ljust(what_width)}  rebuilds when"]
    lines += [f"{name.ljust(name_width)}  {what.ljust(what_width)}  {inputs}"
              for name, what, inputs in plan]
    return [line.rstrip() for line in lines]


def _template_context(plan: BuildPlan) -> dict[str, Any]:
    recipe, lock = plan.recipe, plan.lock
    inputs = [Input(display(recipe.path), recipe.input_hash(),
                    note="extends " + ", ".join(display(p) for p in recipe.sources[1:])
                    if len(recipe.sources) > 1 else "")]
    if lock is not None:
        inputs.append(Input(display(lock.path), lock.file_hash()))
    else:
        inputs.append(Input(display(lock_path(recipe)), "UNLOCKED"))
    uv_lines = []
    for arch, url, sha in UV_WHEELS:
        uv_lines += [f"{arch} {shell_quote(url)} \\", f"{sha} \\"]
    return {
        "syntax": recipe.dockerfile_syntax,
        "header": header(inputs, command=f"imagebuild render {recipe.name}"),
        "locked": plan.locked,
        "recipe_name": recipe.name,
        "rocm": recipe.rocm,
        "stage_lines": _stage_lines(stage_plan(recipe)),
        "base_ref": lock.base_image_pinned if lock else recipe.base_image,
        "scope": plan.cache_scope,
        # Each fetching step points its tools at the site CA: uv and Python's urllib read
        # SSL_CERT_FILE, curl CURL_CA_BUNDLE, git GIT_SSL_CAINFO, pip PIP_CERT.
        "ca_python": ca_env("SSL_CERT_FILE"),
        "ca_curl": ca_env("CURL_CA_BUNDLE"),
        "ca_git": ca_env("GIT_SSL_CAINFO"),
        "ca_all": ca_env("SSL_CERT_FILE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT",
                         "REQUESTS_CA_BUNDLE"),
        "apt_ca_on": APT_CA_ON,
        "apt_ca_off": APT_CA_OFF,
        "builds": plan.builds_from_source,
        "build_packages": list(plan.build_packages),
        "hipblaslt": plan.hipblaslt,
        "plugin": plan.plugin,
        "megatron": plan.megatron,
        "transformer_engine": plan.transformer_engine,
        "rccl_tests": plan.rccl_tests,
        "rccl_tuner": plan.rccl_tuner,
        "tuner_plugin_env": TUNER_PLUGIN_ENV,
        "tuner_config_env": TUNER_CONFIG_ENV,
        "tuner_config_context": TUNER_CONFIG_CONTEXT,
        "added_packages": list(plan.added_packages),
        "python": recipe.python,
        "device_code": {
            "check": DEVICE_CODE_CHECK, "report": DEVICE_CODE_REPORT,
            "targets": ",".join(recipe.gpu_targets),
            "torch_lib": f"{VENV}/lib/python{recipe.python}/site-packages/torch/lib",
            "directories": [f"{recipe.rocm_prefix}/{d}" for d in ROCM_KERNEL_DIRS] + [
                f"{VENV}/lib/python{recipe.python}/site-packages/torch/lib/{d}"
                for d in TORCH_KERNEL_DIRS],
        } if device_code_diet(recipe) else None,
        "rocm_wheels": {"family": recipe.gpu_family, "extras": list(recipe.device_extras),
                        "selector": SELECTOR_FILE if lock and lock.selector else None}
        if recipe.rocm_wheels else None,
        "venv": VENV,
        # A ROCm outside /opt/rocm (the Core SDK's /opt/rocm/core-X.Y): named for the
        # programs and checks that look for ROCM_PATH, then /opt/rocm.
        "rocm_path": recipe.rocm_prefix if recipe.rocm and not recipe.rocm_wheels
        and recipe.rocm_prefix not in (PACKAGED_PREFIX, "/usr") else None,
        # Directories the final image's PATH gets after the base image's own.
        "path_after": [*([plan.rccl_tests.bin_dir] if plan.rccl_tests else []),
                       *([f"{plan.rccl_tuner.prefix}/bin"] if plan.rccl_tuner else [])],
        "uv_version": UV_VERSION,
        "uv_lines": uv_lines,
        "runtime_packages": list(plan.runtime_packages),
        "linked_files": list(plan.linked_files),
        "library_path": ":".join(plan.library_path),
        "env": list(recipe.env),
        "labels": list(plan.labels),
        "checks_dir": IMAGE_CHECKS_DIR,
        "manifest_path": IMAGE_MANIFEST,
        "shim_path": SHIM_PATH,
    }
