"""`imagebuild build RECIPE --stage NAME`, run for real: a locked CPU recipe's python stage
built alone by the Docker engine (BuildKit --target), as the generated pipelines' hipBLASLt
job builds that stage on its large runner.

The stage image gets the recipe's input hash and the stage name as its tag and no `latest`;
it holds the stage's own files (the venv) and none of the final stage's (the image manifest);
a second run reuses it; an unknown stage is refused before anything is built, naming the
stages there are.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from imagebuild.cli import main
from imagebuild.images import image_repository, latest_tag
from testbed.cpu_recipe import write_recipe
from tests.support.engine_env import imagebuild_env

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

NAME = "cpu-stage"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, registry_base_image: str, wheel_index,
        docker_engine) -> dict:
    root = tmp_path_factory.mktemp("stage")
    write_recipe(root, NAME, registry_base_image)
    with imagebuild_env(root, tmp_path_factory.mktemp("cache"), unset=("SOURCE_DATE_EPOCH",)):
        assert main(["lock", NAME, "--index-url", wheel_index.url_for("cpu/")]) == 0
        yield {"project": root, "engine": docker_engine}


def run_image(ref: str, command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "run", "--rm", "--network", "host", ref, "sh", "-c",
                           command], capture_output=True, text=True, timeout=120, check=False)


def test_a_stage_is_built_alone_tagged_by_inputs_and_stage(env: dict, capsys) -> None:
    # A stage image an earlier run of this file left would make the first build a reuse.
    for ref in env["engine"].client.images.list(name=image_repository(NAME)):
        for tag in ref.tags:
            env["engine"].client.images.remove(tag)
    started = time.monotonic()
    code = main(["build", NAME, "--stage", "python"])
    seconds = time.monotonic() - started
    out, err = capsys.readouterr()
    print(out)
    print(f"[stage] python stage of {NAME}: {seconds:.1f} s")
    assert code == 0, out + err[-3000:]
    first = out.splitlines()[0]
    assert first.startswith(f"stage python of {NAME}: {image_repository(NAME)}:")
    ref = first.split(": ", 1)[1].split(" ", 1)[0]
    assert ref.endswith("-python") and first.endswith(" built")
    assert env["engine"].image_exists(ref)
    assert not env["engine"].image_exists(latest_tag(NAME))
    # The stage's venv is there; the final stage's manifest is not.
    assert run_image(ref, "test -x /opt/venv/bin/python").returncode == 0
    assert run_image(ref, "test -e /opt/imagebuild/manifest.json").returncode == 1
    assert (env["project"] / "artifacts" / NAME / "build-python.log").stat().st_size > 0

    assert main(["build", NAME, "--stage", "python"]) == 0
    out, err = capsys.readouterr()
    # (the last line: capsys also holds what this test printed above)
    assert out.splitlines()[-1] == first.replace(" built", " up to date"), err


def test_an_unknown_stage_is_refused_naming_the_stages(env: dict, capsys) -> None:
    assert main(["build", NAME, "--stage", "pyton"]) == 2
    err = capsys.readouterr().err
    assert (f"error: dockerfiles/{NAME}/Dockerfile: --stage pyton: the Dockerfile of {NAME} "
            "has no such stage") in err
    assert "hint: did you mean python? its stages: base, python, final" in err
