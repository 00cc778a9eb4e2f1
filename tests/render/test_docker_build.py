"""The rendered CPU Dockerfile builds on a real BuildKit (Docker 20.10's built-in frontend).

A CPU recipe like the end-to-end one, with allowed-but-awkward ENV and LABEL values, is
locked to small wheels on a local index and built from its staged context. The tests check
what the image holds (venv, manifest, shim, ENV/LABEL values byte for byte), that only the
locked files were fetched, that no secret or build helper is left in the image, and the
cache contract on the real engine: an unchanged rebuild runs no step, an ENV change
re-runs none of the python stage.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from imagebuild.engine.base import BuildRequest
from imagebuild.engine.docker import DockerEngine
from imagebuild.errors import EngineError
from imagebuild.lock.model import Lock
from imagebuild.lock.sources import resolve_base_digest
from imagebuild.recipe.load import load_recipe
from imagebuild.recipe.model import Recipe
from imagebuild.render.context import build_context
from imagebuild.render.manifest import manifest
from imagebuild.render.plan import plan_for
from tests.render.conftest import FIXTURES
from tests.support.render import served_lock

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

AWKWARD_ENV = {
    "PYTHONUNBUFFERED": "1",
    "DOLLAR": "$HOME $PATH $$",  # "${" is refused in env values; the label below has one
    "BACKSLASH": "C:\\new\\table\\",
    "QUOTES": 'say "hi" && echo "x"',
    "HASH": "# not a comment",
}
AWKWARD_LABELS = {"org.example.dollar": "$USER ${PATH}", "org.example.quote": 'a "b" c'}
SITE_CA = Path("/etc/ssl/certs/ca-certificates.crt")


@dataclass
class Built:
    recipe: Recipe
    lock: Lock
    context: Path
    image: str
    output: str


def write_recipe(root: Path, base_image: str, index_url: str, env: dict[str, str]) -> Path:
    data = yaml.safe_load((FIXTURES / "recipes" / "cpu-test.yaml").read_text())
    data.update(base_image=base_image, env=env, labels=AWKWARD_LABELS)
    data["wheels"]["index_url"] = index_url
    data["wheels"]["pypi"] = []
    path = root / "recipes" / "cpu-test.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def build(engine: DockerEngine, root: Path, base_image: str, server, env: dict[str, str],
          tag: str) -> Built:
    recipe = load_recipe(write_recipe(root, base_image, server.url, env))
    lock = served_lock(recipe, server, [("torch", "2.13.0+cpu"), ("tinydep", "1.0")],
                       resolve_base_digest(base_image))
    staged = build_context(plan_for(recipe, lock), root / "context")
    secrets = {"site-ca": SITE_CA} if SITE_CA.is_file() else {}
    result = engine.build(BuildRequest(staged.dockerfile, staged.directory, tags=(tag,),
                                       secrets=secrets), keep_lines=None)
    assert result.returncode == 0, result.output[-6000:]
    return Built(recipe, lock, staged.directory, tag, result.output)


def run(engine: DockerEngine, image: str, script: str) -> str:
    result = engine.run(image, ["sh", "-c", script])
    assert result.exit_code == 0, result.output
    return result.output


def step_states(output: str) -> dict[str, str]:
    """`[stage n/m] INSTRUCTION...` -> "CACHED" or "RAN", from BuildKit's plain progress."""
    names: dict[str, str] = {}
    states: dict[str, str] = {}
    for line in output.splitlines():
        if match := re.match(r"#(\d+) (\[[\w-]+ \d+/\d+\] .*)", line):
            names[match.group(1)] = match.group(2)[:80]
        elif (match := re.match(r"#(\d+) (CACHED|DONE)", line)) and match.group(1) in names:
            states[names[match.group(1)]] = "CACHED" if match.group(2) == "CACHED" else "RAN"
    return states


@pytest.fixture(scope="module")
def built(tmp_path_factory, docker_engine, registry_base_image):
    from tests.support.indexserver import IndexServer

    root = tmp_path_factory.mktemp("docker-build")
    with IndexServer(root / "index") as server:
        first = build(docker_engine, root / "a", registry_base_image, server, AWKWARD_ENV,
                      "imagebuild-render-test/cpu:a")
        requests = sorted(r.path for r in server.requests)
        server.clear_log()
        again = build(docker_engine, root / "a", registry_base_image, server, AWKWARD_ENV,
                      "imagebuild-render-test/cpu:again")
        changed_env = dict(AWKWARD_ENV, OMP_NUM_THREADS="3")
        changed = build(docker_engine, root / "b", registry_base_image, server, changed_env,
                        "imagebuild-render-test/cpu:env")
    yield first, requests, again, changed
    for tag in (first.image, again.image, changed.image):
        with contextlib.suppress(EngineError):
            docker_engine.remove(tag)


def test_image_carries_the_venv_manifest_and_shim(built, docker_engine):
    first, *_ = built
    out = run(docker_engine, first.image,
              "python -c 'import torch, tinydep; print(torch.__version__)'; "
              "command -v python; command -v uv; command -v imagebuild; cat /opt/imagebuild/manifest.json")
    lines = out.splitlines()
    assert lines[:4] == ["2.13.0+cpu", "/opt/venv/bin/python", "/usr/local/bin/uv",
                         "/usr/local/bin/imagebuild"]
    assert json.loads("\n".join(lines[4:])) == manifest(plan_for(first.recipe, first.lock))
    assert os.access(first.context / "bin" / "imagebuild", os.X_OK)
    listing = run(docker_engine, first.image,
                  "ls /opt/imagebuild/checks/imagebuild_checks/__main__.py; dpkg -s libgomp1")
    assert "Status: install ok installed" in listing


def test_env_and_label_values_arrive_byte_for_byte(built, docker_engine):
    first, *_ = built
    config = docker_engine.inspect(first.image)["Config"]
    env = dict(item.split("=", 1) for item in config["Env"])
    for key, value in AWKWARD_ENV.items():
        assert env[key] == value, key
    assert env["VIRTUAL_ENV"] == "/opt/venv"
    assert env["PATH"].startswith("/opt/venv/bin:")
    labels = config["Labels"]
    for key, value in AWKWARD_LABELS.items():
        assert labels[key] == value
    assert labels["imagebuild.recipe"] == "cpu-test"
    assert labels["imagebuild.input-hash"] == first.recipe.input_hash()
    assert labels["imagebuild.torch"] == "2.13.0+cpu"
    assert labels["org.opencontainers.image.base.digest"] == first.lock.base_digest


def test_only_the_locked_files_were_fetched_from_the_index(built):
    first, requests, *_ = built
    assert requests == sorted("/" + w.filename for w in first.lock.wheels)


def test_no_secret_or_build_helper_is_left_in_the_image(built, docker_engine):
    first, *_ = built
    out = run(docker_engine, first.image,
              "ls -A /run/secrets /tmp; ls /etc/apt/apt.conf.d; "
              "test ! -e /root/.cache/uv && echo no-uv-cache; "
              "test ! -e /tmp/imagebuild && echo no-helpers")
    assert "site-ca" not in out
    assert "99imagebuild-site-ca" not in out
    assert "no-uv-cache" in out and "no-helpers" in out


def test_unchanged_rebuild_runs_no_step(built):
    _first, _, again, _ = built
    states = step_states(again.output)
    assert states, again.output[-3000:]
    assert {s for s, state in states.items() if state == "RAN" and "] RUN " in s} == set()
    assert all(state == "CACHED" for s, state in states.items() if "[python" in s)


def test_env_change_reruns_nothing_of_the_python_stage(built):
    *_, changed = built
    states = step_states(changed.output)
    python_steps = {s: state for s, state in states.items() if s.startswith("[python")}
    assert python_steps and set(python_steps.values()) == {"CACHED"}, python_steps
    # The final stage's first step (the OS packages) is reused too; only its tail re-runs.
    assert [state for s, state in states.items() if s.startswith("[final 1/")] == ["CACHED"]

