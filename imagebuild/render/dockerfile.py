"""A build plan -> the multi-stage Dockerfile.

The Dockerfile is the one rendered format: squashfs and SIF are made from the built image,
never from a second renderer. Stages, in order:

    base       FROM the base image pinned by digest (tag when unlocked); nothing else
    toolchain  base + compilers, autotools, ROCm development packages (build stages only)
    <component stages>  each enabled component's own (its folder's stage.j2), in the
               registry's order (imagebuild.components)
    python     base + uv (pinned wheel, sha256) + /opt/venv from the lock, hashes required
    <component stages on the venv>  those that mount the venv
    final      base + runtime OS packages + COPY --from the stages above + manifest, checks,
               ENV, LABEL (the volatile, cheap steps last)

The python and final stages are core templates with places where each enabled component's
steps go (imagebuild.render.stages).

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

from imagebuild import components
from imagebuild.errors import short_path
from imagebuild.generated import GeneratedFile, Input, header
from imagebuild.lock.lockfile import lock_path
from imagebuild.project import project_dir
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
from imagebuild.render.plan import BuildPlan, device_code_diet
from imagebuild.render.quoting import APT_CA_OFF, APT_CA_ON, ca_env, dockerfile_quote, shell_quote
from imagebuild.render.stages import slot_steps, stage_lines, stage_plan, stage_templates

TEMPLATES = Path(__file__).resolve().parent / "templates"


def render_dockerfile(plan: BuildPlan) -> str:
    """The Dockerfile of ``plan``; an unlocked plan renders for review only."""
    env = _environment()
    context = _template_context(plan)
    context["slots"] = slot_steps(env, plan, context)
    return _tidy(env.get_template("Dockerfile.j2").render(**context))


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
    """Core templates by name; a component's as ``<component>/<template>``, from its folder."""
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader([
            jinja2.FileSystemLoader(str(TEMPLATES)),
            jinja2.PrefixLoader({c.name: jinja2.FileSystemLoader(str(c.folder))
                                 for c in components.registered()}),
        ]),
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


def _template_context(plan: BuildPlan) -> dict[str, Any]:
    recipe, lock = plan.recipe, plan.lock
    inputs = [Input(short_path(recipe.path), recipe.input_hash(),
                    note="extends " + ", ".join(short_path(p) for p in recipe.sources[1:])
                    if len(recipe.sources) > 1 else "")]
    if lock is not None:
        inputs.append(Input(short_path(lock.path), lock.file_hash()))
    else:
        inputs.append(Input(short_path(lock_path(recipe)), "UNLOCKED"))
    uv_lines = []
    for arch, url, sha in UV_WHEELS:
        uv_lines += [f"{arch} {shell_quote(url)} \\", f"{sha} \\"]
    uv_lines[-1] = uv_lines[-1].removesuffix(" \\")  # the step's last line
    return {
        "syntax": recipe.dockerfile_syntax,
        "header": header(inputs, command=f"imagebuild render {recipe.name}"),
        "locked": plan.locked,
        "recipe_name": recipe.name,
        "rocm": recipe.rocm,
        "stage_lines": stage_lines(stage_plan(plan)),
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
        "stages": stage_templates(plan),
        "build_packages": list(plan.build_packages),
        # Each enabled component's plan, under its name, for its own templates.
        **{name: part.values for name, part in plan.parts.items()},
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
        "path_after": [d for part in plan.in_final_order() for d in part.path],
        "uv_version": UV_VERSION,
        "uv_lines": uv_lines,
        "runtime_packages": list(plan.runtime_packages),
        "linked_files": list(plan.linked_files),
        "library_path": ":".join(plan.library_path),
        "loader_dirs": [d for part in plan.in_final_order() for d in part.loader_dirs],
        "component_env": [v for part in plan.in_final_order() for v in part.env],
        "env": list(recipe.env),
        "labels": list(plan.labels),
        "checks_dir": IMAGE_CHECKS_DIR,
        "manifest_path": IMAGE_MANIFEST,
        "shim_path": SHIM_PATH,
    }
