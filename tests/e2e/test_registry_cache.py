"""The registry cache for real: a CI runner that never built the image rebuilds only what
changed, with the stages' earlier results taken from the loopback registry.

The runner is a Docker daemon of this test's own (testbed/private_docker.py: Debian trixie's
dockerd 26.1 with the containerd image store, buildx 0.13); "never built" is real: between
builds the daemon is stopped and everything it stored deleted. The machine's shared dockerd
and its build cache are not touched. The recipe is the CPU recipe with Megatron-LM from the
Swiss AI fixture bundle (as in test_training_stack.py), served by git daemon.

1. The first build exports each stage to its own entry of a fresh cache repository and
   pushes the image (provenance attached); the pushed digest is validated (CPU mode, the
   environment check), marked tested and promoted to a stable tag.
2. On an empty runner, the same inputs with --cache-from: every step comes from the
   registry, none is built.
3. On an empty runner, Megatron-LM pinned to the parent commit (and re-locked): imagebuild's
   own stage plan says which stages changed; the stage table shows each unchanged stage
   taken from the registry and a step built in each changed one. The re-lock moves the
   lock's SOURCE_DATE_EPOCH; the python stage never reads it (the final stage dates the
   venv as it copies it), so the venv's install comes from the registry too.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest
import requests

from imagebuild.build.oci_labels import CREATED, REVISION, SOURCE, created
from imagebuild.build.stage_plan import STAGE_DIGESTS_LABEL, compare, read_label
from imagebuild.cli import main
from imagebuild.engine.select import open_engine
from imagebuild.lock.lockfile import read_lock
from testbed.cpu_recipe import MEGATRON_PARENT, MEGATRON_SECTION, torch_wheel, write_recipe
from testbed.private_docker import PrivateDocker
from testbed.source_mirror import SourceMirror
from tests.support.engine_env import imagebuild_env
from tests.support.indexserver import IndexServer

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

NAME = "cpu-cache"
#: The project's git remote: a CI clone's URL carries a job token, the label must not.
REMOTE = "https://gitlab-ci-token:glcbt-SECRET@gitlab.example.org/hpc/images.git"


def git(project: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(project), "-c", "user.name=t",
                           "-c", "user.email=t@example.org", *args], check=True,
                          capture_output=True, text=True).stdout.strip()


def build(*flags: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["build", NAME, "--json", *flags])
    assert code == 0
    return json.loads(out.getvalue())


def labels(ref: str) -> dict[str, str]:
    engine = open_engine("docker", for_build=False)
    try:
        return engine.image_labels(ref)
    finally:
        engine.client.close()  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, registry_base_image: str,
         local_registry: str) -> dict:
    index = tmp_path_factory.mktemp("index")
    (index / torch_wheel().name).symlink_to(torch_wheel())
    project = tmp_path_factory.mktemp("project")
    recipe = write_recipe(project, NAME, registry_base_image)
    base_recipe = recipe.read_text()
    git(project, "init", "-q")
    git(project, "remote", "add", "origin", REMOTE)
    run_id = uuid.uuid4().hex[:12]
    cache = f"{local_registry}/imagebuild-test/stage-cache-{run_id}"
    pushed_to = f"{local_registry}/imagebuild-test/cache-e2e-{run_id}"
    runs: dict = {"cache": cache, "registry": local_registry, "project": project}
    with PrivateDocker(tmp_path_factory.mktemp("runner")) as runner, \
            SourceMirror(tmp_path_factory.mktemp("mirror")) as mirror, IndexServer(index) as served, \
            imagebuild_env(project, tmp_path_factory.mktemp("cache")):
        os.environ.update(runner.env)
        mirrors = [f"--git-mirror={source}={target}" for source, target in mirror.mirrors.items()]

        def lock(ref: str) -> None:
            recipe.write_text(base_recipe + MEGATRON_SECTION.format(ref=ref))
            assert main(["lock", NAME, "--index-url", served.url, *mirrors]) == 0
            assert main(["render", NAME]) == 0  # committed with the lock, as CI checks
            git(project, "add", "-A")
            git(project, "commit", "-qm", f"megatron at {ref}")

        lock("main")
        runs["first"] = build("--cache-from", cache, "--cache-to", cache, "--push", pushed_to)
        runs["first_labels"] = labels(runs["first"]["image"])
        runs["report"] = tmp_path_factory.mktemp("validate") / "report.json"
        assert main(["validate", runs["first"]["pushed"][0], "--launcher", "docker",
                     "--allow-cpu", "--checks", "environment",
                     "--report", str(runs["report"])]) == 0
        runner.fresh()
        runs["same"] = build("--cache-from", cache)
        runner.fresh()
        lock(MEGATRON_PARENT)
        runs["epoch"] = read_lock(project / "recipes" / f"pylock.{NAME}.toml").source_date_epoch
        runs["changed"] = build("--cache-from", cache, "--cache-to", cache, "--push", pushed_to)
        runs["changed_labels"] = labels(runs["changed"]["image"])
        runs["revision"] = git(project, "rev-parse", "HEAD")
        runs["dockerfile"] = project / "dockerfiles" / NAME / "Dockerfile"
    return runs


def steps(result: dict, source: str) -> dict[str, list[str]]:
    return {stage: row[source] for stage, row in result["stages"].items()}


def test_the_first_build_exports_each_stage_to_its_own_entry(runs: dict) -> None:
    repository = runs["cache"].split("/", 1)[1]
    tags = requests.get(f"http://{runs['registry']}/v2/{repository}/tags/list",
                        timeout=30).json()["tags"]
    # the first build's stages with steps (base is only its FROM); the pin change added
    # megatron and final entries, and toolchain and python kept theirs: the re-lock's new
    # SOURCE_DATE_EPOCH is no part of a key
    assert sorted(re.sub(r"-[0-9a-f]{12}$", "", tag) for tag in tags) == \
        ["final", "final", "megatron", "megatron", "python", "toolchain"], tags
    first = runs["first"]
    assert not any(steps(first, "imported").values())  # a new repository: nothing to import
    assert all(steps(first, "built").values())


def test_a_runner_that_never_built_the_image_builds_nothing(runs: dict) -> None:
    same = runs["same"]
    print("\n".join(f"{stage}: {row}" for stage, row in same["stages"].items()))
    assert same["built"]  # no image here: it was made, from the registry cache
    assert steps(same, "built") == {stage: [] for stage in same["stages"]}
    assert sum(len(v) for v in steps(same, "imported").values()) > 0


def test_a_megatron_pin_change_rebuilds_only_the_stages_that_changed(runs: dict) -> None:
    before = read_label(runs["first_labels"])
    after = read_label(runs["changed_labels"])
    assert before and after
    plan = {c.stage: c for c in compare(runs["dockerfile"], after, before)}
    print("\n".join(f"{stage}: {'rebuild' if c.rebuilds else 'reuse'} ({c.why}); "
                    f"steps {runs['changed']['stages'].get(stage)}"
                    for stage, c in plan.items()))
    assert not plan["toolchain"].rebuilds and plan["megatron"].rebuilds
    # the re-lock's new epoch leaves the venv's install alone: imported, not built
    assert not plan["python"].rebuilds
    python = runs["changed"]["stages"]["python"]
    assert not python["built"] and any("uv pip sync" in step or "imagebuild-uv" in step
                                       for step in python["imported"] + python["cached"])
    assert plan["megatron"].why == "its instructions or build args changed"
    for stage, row in runs["changed"]["stages"].items():
        if plan[stage].rebuilds:
            assert row["built"], f"{stage} changed ({plan[stage].why}) but nothing was built"
        else:
            assert not row["built"], f"{stage} is unchanged but built {row['built']}"
            assert row["imported"] or row["cached"]


def test_every_image_carries_the_oci_labels_from_the_build(runs: dict) -> None:
    found = runs["changed_labels"]
    assert found[CREATED] == created(runs["epoch"])
    assert found[REVISION] == runs["revision"]
    assert found[SOURCE] == "https://gitlab.example.org/hpc/images.git"
    assert STAGE_DIGESTS_LABEL in found


def test_the_pushed_image_carries_its_provenance_attestation(runs: dict) -> None:
    first = runs["first"]
    assert first["provenance"] == "attached"
    pinned = first["pushed"][0]
    name, digest = pinned.split("/", 1)[1].split("@")
    index = requests.get(
        f"http://{runs['registry']}/v2/{name}/manifests/{digest}", timeout=30,
        headers={"Accept": "application/vnd.oci.image.index.v1+json"}).json()
    kinds = [m.get("annotations", {}).get("vnd.docker.reference.type")
             for m in index["manifests"]]
    assert "attestation-manifest" in kinds, index


def promote(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(["promote", *argv])
    return code, out.getvalue()


def test_the_validated_digest_is_marked_tested_and_only_it_is_promoted(runs: dict) -> None:
    canonical = runs["first"]["pushed_tags"][0]["ref"]
    digest = runs["first"]["pushed_tags"][0]["digest"]
    code, said = promote("tested", canonical, "--report", str(runs["report"]), "--allow-cpu")
    assert code == 0, said
    code, said = promote("stable", canonical, "2025.06")
    assert code == 0, said
    assert said.startswith(f"promoted {canonical.rsplit(':', 1)[0]}:2025.06 -> {digest}")
    # the image built after the pin change was pushed, never validated: no stable tag
    changed = runs["changed"]["pushed_tags"][0]["ref"]
    assert changed != canonical
    code, said = promote("stable", changed, "2025.07")
    assert code == 2 and "no tested marker" in said


def test_the_sbom_is_attached_to_the_pushed_image(runs: dict) -> None:
    first = runs["first"]
    digest = first["pushed_tags"][0]["digest"]
    tagged, _ = first["sbom"].split("@")
    name, tag = tagged.split("/", 1)[1].rsplit(":", 1)
    assert tag == digest.replace(":", "-") + ".sbom"
    base = f"http://{runs['registry']}/v2/{name}"
    manifest = requests.get(f"{base}/manifests/{tag}", timeout=30, headers={
        "Accept": "application/vnd.oci.image.manifest.v1+json"}).json()
    assert manifest["artifactType"] == "application/vnd.cyclonedx+json"
    assert manifest["subject"]["digest"] == digest
    layer = manifest["layers"][0]
    sbom = requests.get(f"{base}/blobs/{layer['digest']}", timeout=30).json()
    assert sbom["bomFormat"] == "CycloneDX"
    assert any(c.get("name") == "torch" for c in sbom["components"])
