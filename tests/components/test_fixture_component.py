"""A component is its folder and its line in the registry, nothing else: a component made for
the tests (tests/components/fixture/: its recipe section, an archive the lock pins, its own
stage, final-stage steps, build-time check, manifest part, SBOM entry and size-table part),
registered for the time of a test, is in the recipe format, the lock and its check, the
Dockerfile, the build context, the manifest, the SBOM and the size table, with no module of
imagebuild changed. Without it registered, its section is an unknown key."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from imagebuild import components
from imagebuild.build.inventory import inventory_inputs
from imagebuild.convert.sbom import image_sbom, sbom_json, validation_errors
from imagebuild.convert.sizes import classify, size_table
from imagebuild.errors import LockError, RecipeError, RenderError
from imagebuild.lock.check import check_lock
from imagebuild.recipe.format import json_schema
from imagebuild.recipe.load import load_recipe
from imagebuild.render.context import build_context
from imagebuild.render.dockerfile import render_dockerfile
from imagebuild.render.manifest import manifest
from imagebuild.render.plan import plan_for
from imagebuild.render.stages import stage_plan
from tests.components.fixture import component as fixture
from tests.render.conftest import FIXTURES
from tests.support.render import parse_dockerfile, write_lock

URL = "https://example.org/fixture-tool-1.0.tar.gz"
SECTION = f"fixture_tool:\n  enabled: true\n  url: {URL}\n"


def _recipe(tmp_path: Path, section: str = SECTION) -> Path:
    """The CPU fixture recipe with the fixture tool's section."""
    path = tmp_path / "recipes" / "tool.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((FIXTURES / "recipes" / "cpu-test.yaml").read_text() + section)
    return path


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(components, "COMPONENTS", (*components.COMPONENTS, fixture.COMPONENT))


def test_unregistered_its_section_is_an_unknown_key(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="fixture_tool: unknown key"):
        load_recipe(str(_recipe(tmp_path)))


def test_registered_it_is_in_every_stage(registered: None, tmp_path: Path) -> None:
    # recipe: the format has its section, with its rules; the recipe hashes it
    assert json_schema()["properties"]["fixture_tool"]["description"] == fixture.SPEC.description
    with pytest.raises(RecipeError, match="fixture_tool.url: missing"):
        load_recipe(str(_recipe(tmp_path / "bad", "fixture_tool:\n  enabled: true\n")))
    recipe = load_recipe(str(_recipe(tmp_path)))
    assert recipe.to_dict()["fixture_tool"] == {"enabled": True, "url": URL}
    assert recipe.lock_inputs()["fixture_tool"] == URL
    # lock: its archive is pinned, and the check wants it
    lock = write_lock(recipe, tmp_path / "recipes" / "pylock.tool.toml")
    pinned = lock.archive("fixture-tool")
    assert pinned is not None and pinned.url == URL
    check_lock(recipe, lock)
    with pytest.raises(LockError, match=r"\[tool.imagebuild.sources.fixture-tool\] missing"):
        check_lock(recipe, replace(lock, sources={}))
    # Dockerfile: its stage from the toolchain, its steps in the final stage, its env
    plan = plan_for(recipe, lock)
    stages = parse_dockerfile(render_dockerfile(plan))
    assert stages["fixture-tool"].base == "toolchain"
    assert "ca-certificates" in stages["toolchain"].text
    assert f"sha256 {pinned.sha256}" in render_dockerfile(plan)
    final = stages["final"]
    assert "COPY --from=fixture-tool /opt/fixture-tool /opt/fixture-tool" in final.instructions
    assert any("fixture-tool-check.py final /opt/fixture-tool --manifest" in i
               for i in final.instructions)
    env = next(i for i in final.instructions if i.startswith("ENV VIRTUAL_ENV="))
    assert "FIXTURE_TOOL_HOME=/opt/fixture-tool" in env
    assert 'PATH="/opt/venv/bin:${PATH}:/opt/fixture-tool/bin"' in env
    assert ("fixture-tool", "toolchain + the fixture tool", "its archive") in stage_plan(plan)
    # manifest: its part
    assert manifest(plan)["fixture_tool"] == {"enabled": True,
                                              "archive": {"url": URL, "sha256": pinned.sha256}}
    # build context: its check staged with the shared helpers, and it runs
    context = build_context(plan, tmp_path / "context")
    assert {"fixture-tool-check.py/__main__.py",
            "fixture-tool-check.py/buildtime.py"} <= set(context.files)
    check = context.directory / "fixture-tool-check.py"
    prefix = tmp_path / "opt" / "fixture-tool"
    for argv in (["stage", str(prefix)],
                 ["final", str(prefix), "--manifest", str(context.directory / "manifest.json")]):
        subprocess.run([sys.executable, str(check), *argv], check=True, timeout=60)
    written = json.loads((context.directory / "manifest.json").read_text())["fixture_tool"]
    assert written["tool"] == str(prefix / "bin" / "fixture-tool")
    # SBOM: its archive, naming the component; size table: its row
    sbom, layout = inventory_inputs(plan)
    text = sbom_json(image_sbom(sbom, "", {}, 0))
    assert validation_errors(text) is None
    entry = {c["bom-ref"]: c for c in json.loads(text)["components"]}["source:fixture-tool"]
    assert entry["hashes"] == [{"alg": "SHA-256", "content": pinned.sha256}]
    assert {"name": "imagebuild:component", "value": "fixture_tool"} in entry["properties"]
    files = {"opt/fixture-tool/bin/fixture-tool": 300, "opt/venv/bin/python": 100}
    table = size_table(files, classify(files, {}, layout), layout)
    assert ("fixture tool", 300, 1) in table.rows


def test_refused_env_names_it(registered: None, tmp_path: Path) -> None:
    """A variable it sets for what it built is not the recipe's to set."""
    recipe = load_recipe(str(_recipe(tmp_path)))
    with pytest.raises(RenderError, match="env.FIXTURE_TOOL_HOME: set by imagebuild itself "
                                          "while fixture_tool.enabled is true"):
        plan_for(replace(recipe, env=(("FIXTURE_TOOL_HOME", "/x"),)), None)
