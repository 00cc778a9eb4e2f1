"""Loading, merging and hashing of valid recipes, including the shipped ones."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from imagebuild.errors import RecipeNotFound
from imagebuild.recipe.load import load_recipe, recipe_names

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = recipe_names(ROOT)


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(text)
    return path


PARENT = """\
version: 1
rocm: 7.0.2
base_image: rocm/dev-ubuntu-24.04:7.0.2-complete
wheels:
  packages:
    torch: 2.8.0+rocm7.0.2.lw.git245bf6ed
    triton: 3.4.0+rocm7.0.2.gitf9e5bf54
  pypi: [numpy]
gpu_targets: [gfx90a, gfx942]
env:
  KEEP: "1"
  DROP: "2"
labels:
  org.example.a: b
"""


def test_shipped_recipes_cover_the_three_rocm_releases() -> None:
    assert {"rocm-6.4.4", "rocm-7.0.2", "rocm-7.1.1"} <= set(SHIPPED)
    for name in SHIPPED:
        recipe = load_recipe(name, ROOT)
        # 3.12, but for a line's recipe per Python, which names it (rocm-7.14.1-py3.13)
        assert recipe.python == (name.rsplit("-py", 1)[1] if "-py" in name else "3.12"), name
        assert recipe.wheels.version_of("torch"), name
        assert recipe.rocm and recipe.rocm in recipe.wheels.version_of("torch")
        assert recipe.gpu_targets and "all" not in recipe.gpu_targets
        if recipe.multi_arch:  # the TheRock lines: the SDK's wheels carry hipBLASLt
            assert recipe.wheels.index_url in (
                "https://repo.amd.com/rocm/whl-multi-arch/",
                "https://stable.repo.amd.com/rocm/whl-next/"), name
            assert "gfx90a" not in recipe.gpu_targets
            continue
        assert recipe.wheels.index_url.endswith(f"rocm-rel-{recipe.rocm}/")
        assert recipe.components["hipblaslt"].enabled


def test_new_rocm_release_is_a_short_file() -> None:
    text = (ROOT / "recipes" / "rocm-7.0.2.yaml").read_text()
    assert len([line for line in text.splitlines() if line.strip()]) <= 15


def test_extends_merges_mappings_and_replaces_lists(tmp_path: Path) -> None:
    write(tmp_path, "_parent", PARENT)
    child = write(tmp_path, "child", """\
version: 1
extends: _parent
wheels:
  packages:
    triton: null
    torchvision: 0.24.0+rocm7.0.2.gitb919bd0c
gpu_targets: [gfx950]
env:
  DROP: null
  ADD: "3"
""")
    recipe = load_recipe(str(child))
    assert dict(recipe.wheels.pinned) == {
        "torch": "2.8.0+rocm7.0.2.lw.git245bf6ed",
        "torchvision": "0.24.0+rocm7.0.2.gitb919bd0c"}
    assert recipe.wheels.extra == ("numpy",)
    assert recipe.gpu_targets == ("gfx950",)
    assert dict(recipe.env) == {"KEEP": "1", "ADD": "3"}
    assert recipe.sources == (child, tmp_path / "_parent.yaml")
    assert recipe.name == "child"


def test_defaults_fill_switches(tmp_path: Path) -> None:
    recipe = load_recipe(str(write(tmp_path, "r", PARENT)))
    assert recipe.python == "3.12"
    assert not recipe.components["hipblaslt"].enabled
    assert not recipe.components["network_plugin"].enabled
    assert recipe.dockerfile_syntax == "docker/dockerfile:1.7"
    assert recipe.wheels.index_url == \
        "https://repo.radeon.com/rocm/manylinux/rocm-rel-7.0.2/"


def test_env_and_labels_change_the_input_hash_but_not_the_lock(tmp_path: Path) -> None:
    base = load_recipe(str(write(tmp_path, "a", PARENT)))
    env_changed = load_recipe(str(write(tmp_path, "b", PARENT.replace('KEEP: "1"',
                                                                      'KEEP: "9"'))))
    pin_changed = load_recipe(str(write(tmp_path, "c", PARENT.replace("git245bf6ed",
                                                                      "git00000000"))))
    assert env_changed.input_hash() != base.input_hash()
    assert env_changed.lock_input_hash() == base.lock_input_hash()
    assert pin_changed.lock_input_hash() != base.lock_input_hash()


def test_hash_is_stable_across_key_order(tmp_path: Path) -> None:
    head, tail = PARENT.split("env:\n")
    reordered = "env:\n" + tail + head  # same keys and values, env block first
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    a = load_recipe(str(write(tmp_path / "one", "r", PARENT)))
    b = load_recipe(str(write(tmp_path / "two", "r", reordered)))
    assert a.input_hash() == b.input_hash()


def test_unknown_recipe_name_suggests_the_closest(tmp_path: Path) -> None:
    (tmp_path / "recipes").mkdir()
    write(tmp_path / "recipes", "rocm-7.0.2", PARENT)
    with pytest.raises(RecipeNotFound, match="did you mean 'rocm-7.0.2'"):
        load_recipe("rocm-7.0.3", tmp_path)


@pytest.mark.parametrize("name", ["rocm-7.0.2", "rocm-7.0.2-swiss-ai", "rocm-7.1.1"])
def test_show_prints_a_recipe_that_loads_back_to_the_same_recipe(
        name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every key `show` prints is one a recipe may write: its merged view, saved as a
    recipe of its own (no extends), is the same recipe (same input hash)."""
    import json

    from imagebuild.cli import main

    repo = Path(__file__).resolve().parents[2]
    assert main(["-C", str(repo), "show", name, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / f"{name}.yaml").write_text(yaml.safe_dump(shown["merged"]))
    again = load_recipe(name, tmp_path)
    assert again.input_hash() == shown["input_hash"]
