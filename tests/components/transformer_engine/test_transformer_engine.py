"""TransformerEngine's recipe section and plan: the source route the packaged-ROCm recipes
without the index's wheels take (ROCm/TransformerEngine at a locked commit, with its
submodules, for gpu_targets, setuptools<80, the job cap from the cgroup's memory), the wheel
route rocm-7.1.1 keeps, and the refusal of a GPU target the index's libraries lack."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.components.transformer_engine import component as te
from imagebuild.errors import RecipeError
from imagebuild.recipe.load import load_recipe
from imagebuild.recipe.model import GitSource
from imagebuild.render.dockerfile import render_dockerfile
from imagebuild.render.manifest import manifest
from imagebuild.render.plan import plan_for
from tests.components.conftest import REPO
from tests.support.render import parse_dockerfile, write_lock

TE_REPO = "https://github.com/ROCm/TransformerEngine.git"


@pytest.mark.parametrize("name", ["rocm-7.0.2", "rocm-7.0.2-swiss-ai", "rocm-7.2.4"])
def test_recipes_without_the_indexs_wheels_build_it_from_source(name: str) -> None:
    engine = te.section(load_recipe(name, REPO))
    assert engine is not None and engine.version == ""
    assert engine.source == GitSource(TE_REPO, "release_v2.4_rocm")
    assert engine.missing_targets == ()


def test_rocm_7_1_1_keeps_the_wheels_and_says_it_accepts_no_gfx90a() -> None:
    engine = te.section(load_recipe("rocm-7.1.1", REPO))
    assert engine is not None and engine.version == "2.2.0" and engine.source is None
    assert engine.missing_targets == ("gfx90a",)


def _recipe(tmp_path: Path, section: str, targets: str = "[gfx90a, gfx942]") -> Path:
    path = tmp_path / "r.yaml"
    path.write_text("version: 1\nrocm: 7.1.1\nbase_image: b:1\nwheels:\n"
                    "  index_url: https://example.org/\n  packages:\n    torch: 2.9.1\n"
                    f"gpu_targets: {targets}\ntransformer_engine:\n  enabled: true\n" + section)
    return path


@pytest.mark.parametrize(("section", "targets", "problem"), [
    ("  version: 2.2.0\n", "[gfx90a, gfx942]",
     ('the index\'s TransformerEngine has no code for gfx90a (AMD builds transformer_engine_rocm '
     'for gfx942;gfx950 only): its first kernel there would fail with "invalid device '
     'function"')),
    (f"  repository: {TE_REPO}\n", "[gfx942]",
     "transformer_engine.ref: missing (required with transformer_engine.repository)"),
    (f"  version: 2.2.0\n  repository: {TE_REPO}\n  ref: main\n", "[gfx942]",
     "transformer_engine.version: set with repository and ref"),
    ("  version: 2.2.0\n  missing_targets: [gfx950]\n", "[gfx942]",
     "transformer_engine.missing_targets: gfx950 is not in gpu_targets"),
])
def test_bad_sections_are_refused_at_load(tmp_path: Path, section: str, targets: str,
                                          problem: str) -> None:
    with pytest.raises(RecipeError) as caught:
        load_recipe(str(_recipe(tmp_path, section, targets)))
    assert problem in str(caught.value)


def test_the_wheels_for_gfx942_only_or_accepting_gfx90a_load(tmp_path: Path) -> None:
    load_recipe(str(_recipe(tmp_path, "  version: 2.2.0\n", "[gfx942]")))
    accepted = load_recipe(str(_recipe(tmp_path, "  version: 2.2.0\n  missing_targets: "
                                                 "[gfx90a]\n")))
    assert te.section(accepted).missing_targets == ("gfx90a",)  # type: ignore[union-attr]


def test_the_source_route_locks_the_commit_and_its_build_requirements() -> None:
    recipe = load_recipe("rocm-7.0.2", REPO)
    engine = te.section(recipe)
    assert engine is not None
    [pin] = te.COMPONENT.pins(engine, recipe)
    assert (pin.key, pin.source) == ("transformer-engine", engine.source)  # type: ignore[union-attr]
    assert "setuptools<80" in te.COMPONENT.requirements(engine)
    assert "pybind11" in te.COMPONENT.requirements(engine)


def test_the_source_stage_builds_the_locked_commit_with_submodules_for_gpu_targets(
        tmp_path: Path) -> None:
    recipe = load_recipe("rocm-7.0.2", REPO)
    lock = write_lock(recipe, tmp_path / "pylock.rocm-7.0.2.toml")
    locked = lock.git("transformer-engine")
    assert locked is not None
    plan = plan_for(recipe, lock)
    assert {"cmake", "ninja-build"} <= set(plan.build_packages)
    assert "zstd" in plan.runtime_packages
    stages = parse_dockerfile(render_dockerfile(plan))
    flat = " ".join(stages["transformer-engine"].text.split())
    assert f"fetch -q --depth 1 origin {locked.commit} " in flat
    assert "submodule update --init --recursive --depth 1" in flat
    assert "submodule foreach --quiet --recursive" in flat
    assert ('"echo \\"\\$sha1 \\$displaypath \\$(git config --get remote.origin.url)\\"" > '
            "/opt/transformer-engine-wheels/submodules.txt") in flat
    assert "NVTE_USE_ROCM=1 NVTE_USE_HIPBLASLT=1 NVTE_ROCM_ARCH='gfx90a;gfx942'" in flat
    assert "PYTORCH_ROCM_ARCH='gfx90a;gfx942'" in flat
    # The job cap honours the cgroup's memory.max, as the hipBLASLt stage's does.
    assert 'limit="$(cat /sys/fs/cgroup/memory.max 2>/dev/null)"' in flat
    assert "uv build --wheel --no-build-isolation --no-cache --offline" in flat
    final = " ".join(stages["final"].text.split())
    assert ("transformer-engine-check.py --distribution transformer_engine --submodules "
            "/tmp/imagebuild/te-submodules.txt --targets gfx90a,gfx942 --manifest") in final
    data = manifest(plan)["transformer_engine"]
    assert data["source"] == {"repository": TE_REPO, "ref": "release_v2.4_rocm",
                              "commit": locked.commit}
    [source] = plan.parts["transformer_engine"].sources
    assert source.pin == locked and source.name == "transformer-engine"


def test_the_wheel_route_checks_device_code_accepting_what_the_recipe_accepts(
        tmp_path: Path) -> None:
    recipe = load_recipe("rocm-7.1.1", REPO)
    plan = plan_for(recipe, write_lock(recipe, tmp_path / "pylock.rocm-7.1.1.toml"))
    stages = parse_dockerfile(render_dockerfile(plan))
    final = " ".join(stages["final"].text.split())
    assert ("--distribution transformer_engine_torch --version 2.2.0 --targets gfx90a,gfx942 "
            "--accept-missing gfx90a") in final
    assert 'limit="$(cat /sys/fs/cgroup/memory.max' in stages["transformer-engine"].text
    assert manifest(plan)["transformer_engine"]["missing_targets_accepted"] == ["gfx90a"]
