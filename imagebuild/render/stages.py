"""The Dockerfile's stages and the places in them where each component's steps go.

Between base and final come the toolchain (when a component builds from source), each
enabled component's own stage in the registry's order, and the python stage, right before
the first component stage that mounts the venv. The python and final stages are core
templates with places (``SLOTS``): a component's step templates define a macro for each
place it has a step at, and each place gets the enabled components' macros in the final
stage's order of the components.
"""

from __future__ import annotations

from typing import Any

import jinja2

from imagebuild.errors import RenderError
from imagebuild.render.plan import BuildPlan

#: The places in the python and final stages where components' steps go, in the order
#: the stages hold them: a component's step templates define a macro for each place it
#: has a step at.
SLOTS = (
    "python_note",   # python: a comment before the venv's install
    "python_step",   # python: a `&& ...` line of the venv's install
    "copy",          # final: COPY --from=<its stage>, before the venv
    "venv_install",  # final: installs into the venv, right after it is copied
    "venv_path",     # final: what goes on the venv's import path
    "link",          # final: links that make one library serve everyone
    "loader_note",   # final: a comment before the loader cache and ldd step
    "load_check",    # final: a library RCCL dlopens loads, its record into the manifest
    "check",         # final: what Python imports is there and right, into the manifest
    "env_note",      # final: a comment on the variables it sets
    "path_note",     # final: a comment on what it puts on PATH
)


def stage_plan(plan: BuildPlan) -> list[tuple[str, str, str]]:
    """(stage, what it holds, the inputs whose change rebuilds it), in Dockerfile order.

    The same facts tests/render/test_cache.py proves over the rendered stage graph.
    """
    rows = [("base", "FROM the pinned base image, nothing added", "base image digest")]
    if plan.builds_from_source:
        rows.append(("toolchain", "base + compilers, ROCm development packages", "base image"))
    before, after = plan.stages()
    rows += [(p.stage.name, p.stage.holds, p.stage.rebuilds) for p in before if p.stage]
    rows.append(("python", "base + uv + /opt/venv from the lock",
                 "wheel pins (the lock's wheels), Python version"))
    rows += [(p.stage.name, p.stage.holds, p.stage.rebuilds) for p in after if p.stage]
    rows.append(("final", "base + runtime packages + the stages' installs",
                 "os_packages, env, labels; re-copies any rebuilt stage"))
    return rows


def stage_templates(plan: BuildPlan) -> list[str]:
    """The templates of the stages between base and final, in Dockerfile order."""
    before, after = plan.stages()
    return ([*(["toolchain.j2"] if plan.builds_from_source else []),
             *(f"{p.name}/{p.stage.template}" for p in before if p.stage), "python.j2",
             *(f"{p.name}/{p.stage.template}" for p in after if p.stage)])


def stage_lines(plan: list[tuple[str, str, str]]) -> list[str]:
    name_width = max(len(name) for name, _, _ in plan)
    what_width = max(len(what) for _, what, _ in plan)
    lines = [f"{'stage'.ljust(name_width)}  {'holds'.ljust(what_width)}  rebuilds when"]
    lines += [f"{name.ljust(name_width)}  {what.ljust(what_width)}  {inputs}"
              for name, what, inputs in plan]
    return [line.rstrip() for line in lines]


def slot_steps(env: jinja2.Environment, plan: BuildPlan, context: dict[str, Any]
           ) -> dict[str, list[str]]:
    """Each place's steps: every enabled component's macro of that name, in the final
    stage's order of the components."""
    slots: dict[str, list[str]] = {name: [] for name in SLOTS}
    for part in plan.in_final_order():
        for template in part.steps:
            module = env.get_template(f"{part.name}/{template}").make_module(vars=context)
            macros = {name: value for name, value in vars(module).items()
                      if isinstance(value, jinja2.runtime.Macro)}
            unknown = sorted(set(macros) - set(SLOTS))
            if unknown:
                raise RenderError(f"{part.name}/{template}: no place for its macros "
                                  f"{', '.join(unknown)} (the places: {', '.join(SLOTS)})")
            for name in SLOTS:
                if name in macros:
                    slots[name].append(str(macros[name]()))
    return slots
