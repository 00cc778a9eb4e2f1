"""A recipe on a base image of the ROCm Core SDK lines (7.14.x, 10.x): ROCm is where those
lines install it, the stages build against that directory, and the targets TheRock does not
release-test are refused as they are for its wheels."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from imagebuild.errors import RecipeError
from imagebuild.recipe.load import load_recipe
from imagebuild.recipe.rocm_layout import is_therock_line, system_prefix
from imagebuild.render.dockerfile import render_dockerfile
from imagebuild.render.plan import plan_for
from tests.render.conftest import REPO
from tests.support.render import parse_dockerfile, write_lock


@pytest.mark.parametrize(("rocm", "prefix"), [
    ("6.4.4", "/opt/rocm"), ("7.2.4", "/opt/rocm"), ("7.14.1", "/opt/rocm/core"),
    ("10.0.0", "/opt/rocm/core-10.0"), ("10.1.0", "/opt/rocm/core-10.1"), (None, "/opt/rocm")])
def test_each_line_installs_where_its_transition_guide_says(rocm: str | None,
                                                           prefix: str) -> None:
    assert system_prefix(rocm) == prefix
    assert is_therock_line(rocm or "") == (prefix != "/opt/rocm")


def _recipe(tmp_path: Path, rocm: str, extra: str = "",
            targets: str = "[gfx942]") -> Path:
    path = tmp_path / f"rocm-{rocm}.yaml"
    path.write_text(f"version: 1\nrocm: {rocm}\n"
                    f"base_image: rocm/dev-ubuntu-24.04:{rocm}-full\n"
                    f"gpu_targets: {targets}\n"
                    "wheels:\n  index_url: https://example.org/simple/\n"
                    "  packages:\n    torch: 2.14.0\n" + extra)
    return path


def test_a_10x_base_image_recipe_builds_against_core_10_1(tmp_path: Path) -> None:
    recipe = load_recipe(str(_recipe(tmp_path, "10.1.0")))
    assert recipe.rocm_prefix == "/opt/rocm/core-10.1"
    named = load_recipe(str(_recipe(tmp_path, "10.1.0", "rocm_prefix: /opt/rocm\n")))
    assert named.rocm_prefix == "/opt/rocm"  # a recipe that names one keeps it
    assert load_recipe(str(_recipe(tmp_path, "7.2.4"))).rocm_prefix == "/opt/rocm"


def test_the_stages_of_a_10x_recipe_use_its_directory(tmp_path: Path) -> None:
    shipped = load_recipe("rocm-7.2.4", REPO)
    recipe = replace(shipped, rocm="10.1.0", rocm_prefix=system_prefix("10.1.0"),
                     base_image="rocm/dev-ubuntu-24.04:10.1.0-full")
    text = render_dockerfile(plan_for(recipe, write_lock(recipe, tmp_path / "pylock.toml")))
    stages = parse_dockerfile(text)
    assert "NCCL_HOME=/opt/rocm/core-10.1" in stages["rccl-tests"].text
    assert "/opt/rocm/core-10.1/bin/hipcc" in stages["rccl-tests"].text
    assert "/opt/rocm/core-10.1/llvm" in stages["hipblaslt"].text
    assert "/opt/rocm/core-10.1/lib/rocblas/library" in stages["final"].text  # the diet
    assert "/opt/rocm/core-10.1" in stages["plugin"].text
    assert "/opt/rocm/lib" not in text and "/opt/rocm/bin" not in text
    # named for the image's programs and checks (ROCM_PATH, else /opt/rocm)
    assert "ROCM_PATH=/opt/rocm/core-10.1 " in stages["final"].text
    packaged = render_dockerfile(plan_for(shipped, write_lock(shipped, tmp_path / "p.toml")))
    assert "ROCM_PATH=" not in parse_dockerfile(packaged)["final"].text


def test_gfx90a_on_a_therock_base_is_refused_unless_accepted(tmp_path: Path) -> None:
    with pytest.raises(RecipeError) as caught:
        load_recipe(str(_recipe(tmp_path, "10.1.0", targets="[gfx90a, gfx942]")))
    assert "gpu_targets: a TheRock base image: gfx90a:" in str(caught.value)
    assert "accept_untested_targets" in str(caught.value)
    accepted = load_recipe(str(_recipe(tmp_path, "10.1.0", "accept_untested_targets: [gfx90a]\n",
                                       targets="[gfx90a, gfx942]")))
    assert accepted.gpu_targets == ("gfx90a", "gfx942")
    # the packaged line release-tests gfx90a: nothing to accept there
    assert load_recipe(str(_recipe(tmp_path, "7.2.4", targets="[gfx90a]"))).gpu_targets \
        == ("gfx90a",)
    with pytest.raises(RecipeError, match="accept_untested_targets: only applies to the "
                                          "TheRock lines"):
        load_recipe(str(_recipe(tmp_path, "7.2.4", "accept_untested_targets: [gfx90a]\n",
                                targets="[gfx90a]")))
