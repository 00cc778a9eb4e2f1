"""AOCL-BLIS, the CPU reference hipBLASLt's clients link: pinned by the lock, fetched through
the site's git mirror and installed where install.sh -c looks before it downloads a prebuilt
copy from GitHub (install_blis skips its wget when /usr/local/lib/libblis.a exists; the
clients' findBLIS.cmake / FindBLIS.cmake take that file and /usr/local/include/blis). The
lock resolves a real local repository through a mirror, and the stage's fetch runs for real
against it; the BLIS compile itself needs AMD's sources, which this machine cannot reach."""

from __future__ import annotations

import re
import subprocess
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
import tomli_w

from imagebuild.components.hipblaslt import component as hipblaslt
from imagebuild.convert.sbom import source_components
from imagebuild.errors import RenderError
from imagebuild.lock.lockfile import header, read_lock
from imagebuild.lock.model import Lock
from imagebuild.lock.sources import resolve_git
from imagebuild.recipe.load import load_recipe
from imagebuild.recipe.model import Recipe
from imagebuild.render.dockerfile import render_dockerfile
from imagebuild.render.manifest import manifest
from imagebuild.render.plan import plan_for
from tests.components.conftest import REPO
from tests.lock.conftest import git_repo
from tests.support.render import (
    cache_keys,
    first_changed,
    parse_dockerfile,
    rebuilt,
    write_lock,
)

GITHUB_AMD = "https://github.com/amd/"
SHIPPED = ["rocm-6.4.4", "rocm-7.0.2", "rocm-7.2.4"]


def relocked(recipe: Recipe, lock: Lock, path: Path, key: str, commit: str) -> Lock:
    """``lock`` with the source ``key`` at another commit."""
    document = tomllib.loads(lock.path.read_text(encoding="utf-8"))
    document["tool"]["imagebuild"]["sources"][key]["commit"] = commit
    path.write_text(header(recipe) + tomli_w.dumps(document), encoding="utf-8")
    return read_lock(path)


def mirrored_lock(recipe: Recipe, tmp_path: Path) -> tuple[Lock, str]:
    """A lock whose AOCL-BLIS pin was resolved through a git mirror of github.com/amd/ (a
    local repository with the recipe's tag); returns it and the tagged commit."""
    blis = recipe.components["hipblaslt"].blis  # type: ignore[attr-defined]
    assert blis is not None and blis.repository.startswith(GITHUB_AMD)
    mirror = tmp_path / "mirror"
    commit = git_repo(mirror / blis.repository.removeprefix(GITHUB_AMD), blis.ref,
                      annotated=True)
    locked = resolve_git(blis.repository, blis.ref, {GITHUB_AMD: f"file://{mirror}/"})
    path = tmp_path / f"pylock.{recipe.name}.toml"
    write_lock(recipe, path)
    document = tomllib.loads(path.read_text(encoding="utf-8"))
    document["tool"]["imagebuild"]["sources"][hipblaslt.BLIS_LOCK_KEY] = {
        "repository": locked.repository, "ref": locked.ref, "commit": locked.commit}
    path.write_text(header(recipe) + tomli_w.dumps(document), encoding="utf-8")
    return read_lock(path), commit


def steps_of(recipe: Recipe, lock: Lock | None) -> list[str]:
    return parse_dockerfile(render_dockerfile(plan_for(recipe, lock)))["hipblaslt"].instructions


def shell(instruction: str) -> str:
    """A RUN's shell command, whitespace collapsed and mounts stripped."""
    return re.sub(r"^RUN\s+(--mount=\S+\s+)*", "", re.sub(r"\s+", " ", instruction))


@pytest.mark.parametrize("name", SHIPPED)
def test_the_stage_builds_blis_at_the_locked_commit_through_the_mirror_before_install_sh(
        name: str, tmp_path: Path):
    recipe = load_recipe(name, REPO)
    lock, commit = mirrored_lock(recipe, tmp_path)
    steps = steps_of(recipe, lock)
    blis = next(i for i, step in enumerate(steps) if "git init -q /usr/src/aocl-blis" in step)
    source = next(i for i, s in enumerate(steps) if "git init -q /usr/src/hipblaslt" in s)
    install = next(i for i, step in enumerate(steps) if "./install.sh -c " in step)
    # fetched, then built in the checkout, all before hipBLASLt's source (a new hipBLASLt
    # commit reuses these layers)
    assert steps[blis + 1:blis + 2] == ["WORKDIR /usr/src/aocl-blis"]
    assert blis + 2 < source < install
    fetch, command = shell(steps[blis]), shell(steps[blis + 2])
    mirror_url = f"file://{tmp_path}/mirror/blis.git"
    assert f"git -C /usr/src/aocl-blis remote add origin {mirror_url} " in fetch
    assert f"git -C /usr/src/aocl-blis fetch -q --depth 1 origin {commit} " in fetch
    assert "github.com" not in fetch + command
    # where install_blis looks before its wget, and the clients' CMake then finds it
    configure = re.match(r"\./configure (.*?) &&", command)
    assert configure is not None
    assert configure.group(1).split() == ["--prefix=/usr/local", "--enable-cblas",
                                          "--enable-threading=openmp", "--disable-shared",
                                          "--enable-static", "amdzen"]
    # the step fails unless install_blis's file and the headers the clients include exist
    assert {"test -e /usr/local/lib/libblis.a", "test -e /usr/local/include/blis/blis.h",
            "test -e /usr/local/include/blis/cblas.h"} <= set(command.split(" && "))


def test_the_stage_fetch_gets_the_locked_commit_from_the_mirror(tmp_path: Path):
    """The fetch lines of the BLIS step, run as written against the mirror's repository,
    check out the commit the lock names (the tag moved on since: a second commit)."""
    recipe = load_recipe("rocm-7.2.4", REPO)
    lock, commit = mirrored_lock(recipe, tmp_path)
    step = next(s for s in steps_of(recipe, lock) if "/usr/src/aocl-blis" in s)
    fetch = shell(step).split("; fi && ", 1)[1]  # after the site-CA line
    checkout = tmp_path / "checkout"
    subprocess.run(["sh", "-ec", fetch.replace("/usr/src/aocl-blis", str(checkout))],
                   check=True, capture_output=True)
    head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    assert head == commit
    assert (checkout / "README").read_text() == "one\n"


def test_manifest_and_sbom_record_the_blis_pin(tmp_path: Path):
    recipe = load_recipe("rocm-7.0.2", REPO)
    lock, commit = mirrored_lock(recipe, tmp_path)
    plan = plan_for(recipe, lock)
    assert manifest(plan)["hipblaslt"]["blis"] == {
        "repository": f"file://{tmp_path}/mirror/blis.git", "ref": "5.1", "commit": commit,
        "library": "/usr/local/lib/libblis.a"}
    named = {c.name: c for c in source_components(plan.parts["hipblaslt"].sources)}
    assert set(named) == {"hipblaslt", "aocl-blis"}
    assert named["aocl-blis"].version == commit


def test_the_recipe_pins_blis_with_the_clients_only(tmp_path: Path):
    """Clients off: no BLIS pin, input or step; the lock inputs are those of before."""
    recipe = load_recipe("rocm-7.0.2", REPO)
    hip = recipe.components["hipblaslt"]
    assert [p.key for p in hipblaslt.pins(hip, recipe)] == ["hipblaslt", "aocl-blis"]  # type: ignore[arg-type]
    assert "hipblaslt_blis" in recipe.lock_inputs()
    off = recipe.with_component("hipblaslt", replace(hip, clients=False, blis=None))  # type: ignore[arg-type]
    assert [p.key for p in hipblaslt.pins(off.components["hipblaslt"], off)] == ["hipblaslt"]  # type: ignore[arg-type]
    assert "hipblaslt_blis" not in off.lock_inputs()
    stages = parse_dockerfile(render_dockerfile(plan_for(off, write_lock(off, tmp_path / "x.toml"))))
    text = "\n".join(step for stage in stages.values() for step in stage.instructions)
    assert "blis" not in text.lower()
    assert "./install.sh -j" in text


def test_a_recipe_without_clients_reads_no_blis(tmp_path: Path):
    project = tmp_path / "project"
    (project / "recipes").mkdir(parents=True)
    for source in (REPO / "recipes").glob("*.yaml"):
        (project / "recipes" / source.name).write_text(source.read_text())
    path = project / "recipes" / "rocm-7.0.2.yaml"
    path.write_text(path.read_text().replace("hipblaslt:\n", "hipblaslt:\n  clients: false\n"))
    recipe = load_recipe(str(path))
    assert recipe.components["hipblaslt"].blis is None  # type: ignore[attr-defined]


def test_clients_without_blis_refuse_to_render():
    recipe = load_recipe("rocm-7.0.2", REPO)
    hip = recipe.components["hipblaslt"]
    broken = recipe.with_component("hipblaslt", replace(hip, blis=None))  # type: ignore[arg-type]
    with pytest.raises(RenderError, match=r"hipblaslt\.blis: missing"):
        plan_for(broken, None)


def test_a_new_hipblaslt_commit_reuses_the_blis_layers(tmp_path: Path):
    """BuildKit's cache keys (modelled): the BLIS steps come first in the stage, so a new
    hipBLASLt commit re-runs from its own fetch on; a new BLIS commit rebuilds this stage
    (and the final stage's copy of it) and nothing else."""
    recipe = load_recipe("rocm-7.2.4", REPO)
    lock, _ = mirrored_lock(recipe, tmp_path)
    steps = steps_of(recipe, lock)
    source = next(i for i, s in enumerate(steps) if "git init -q /usr/src/hipblaslt" in s)
    before = cache_keys(render_dockerfile(plan_for(recipe, lock)))
    new_hipblaslt = relocked(recipe, lock, tmp_path / "a.toml", "hipblaslt", "1" * 40)
    after = cache_keys(render_dockerfile(plan_for(recipe, new_hipblaslt)))
    # keys[0] is the FROM; step i of the stage is keys[i + 1]
    assert first_changed(before["hipblaslt"], after["hipblaslt"]) == source + 1
    new_blis = relocked(recipe, lock, tmp_path / "b.toml", hipblaslt.BLIS_LOCK_KEY, "2" * 40)
    after = cache_keys(render_dockerfile(plan_for(recipe, new_blis)))
    assert rebuilt(before, after) == {"hipblaslt", "final"}
    blis = next(i for i, s in enumerate(steps) if "git init -q /usr/src/aocl-blis" in s)
    assert first_changed(before["hipblaslt"], after["hipblaslt"]) == blis + 1
