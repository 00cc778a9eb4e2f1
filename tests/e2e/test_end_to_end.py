"""End to end on a real Docker engine: lock -> build -> squash (.sqsh, .sif, EDF) -> run ->
validate, then a second build that is a no-op, and a push to a loopback registry.

The phases run in order in one test module (each needs the previous one's image); every
phase prints its wall time so the CI log shows where the minutes go.
"""

from __future__ import annotations

import json
import subprocess
import time
import tomllib
from pathlib import Path

import pytest
import requests

from imagebuild.cli import main
from imagebuild.images import BUILD_HASH_LABEL, latest_tag
from tests.support.engine_env import imagebuild_env
from tests.support.squashfs import cat, read_squashfs, sif_objects

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

RECIPE = "cpu-e2e"
IMAGE = latest_tag(RECIPE)


@pytest.fixture(scope="module")
def env(project: Path, wheel_index, tmp_path_factory, docker_engine) -> dict:
    with imagebuild_env(project, tmp_path_factory.mktemp("cache")):
        yield {"project": project, "index": wheel_index.url_for("cpu/"),
               "artifacts": project / "artifacts", "engine": docker_engine}


def timed(label: str, argv: list[str], capsys) -> tuple[int, str, str]:
    started = time.monotonic()
    code = main(argv)
    out, err = capsys.readouterr()
    print(f"\n[e2e] {label}: {time.monotonic() - started:.1f} s (exit {code})")
    return code, out, err


def docker_run(*command: str) -> str:
    return subprocess.run(["/usr/bin/docker", "run", "--rm", "--network", "host", IMAGE,
                           *command], check=True, capture_output=True, text=True).stdout


def test_1_lock(env: dict, capsys) -> None:
    code, _out, err = timed("lock", ["lock", RECIPE, "--index-url", env["index"]], capsys)
    assert code == 0, err
    lock = tomllib.loads((env["project"] / "recipes" / f"pylock.{RECIPE}.toml").read_text())
    names = {p["name"] for p in lock["packages"]}
    assert {"torch", "typing-extensions", "filelock"} <= names
    assert lock["tool"]["imagebuild"]["base-digest"].startswith("sha256:")
    assert main(["lock", "--check", "--strict"]) == 0


def test_2_build_and_squash(env: dict, capsys) -> None:
    code, out, err = timed("build + squash", [
        "build", RECIPE, "--squash", "sqsh,sif", "--site", "cscs-beverin"], capsys)
    assert code == 0, err[-3000:]
    assert "built" in out and "up to date" not in out.splitlines()[0]
    print(out)
    dockerfile = env["project"] / "dockerfiles" / RECIPE / "Dockerfile"
    assert dockerfile.is_file()
    assert main(["render", "--check", RECIPE]) == 0
    labels = env["engine"].image_labels(IMAGE)
    assert labels[BUILD_HASH_LABEL].startswith("sha256:")
    assert labels["org.example.purpose"] == "end-to-end-test"
    assert (env["artifacts"] / RECIPE / "build.log").stat().st_size > 0


def test_3_squashfs_holds_the_image(env: dict) -> None:
    sqsh = env["artifacts"] / f"{RECIPE}.sqsh"
    members = read_squashfs(sqsh)
    assert "opt/venv/bin/python" in members
    assert any(p.startswith("opt/venv/lib/python3.11/site-packages/torch/") for p in members)
    manifest = json.loads(cat(sqsh, "opt/imagebuild/manifest.json"))
    assert manifest["recipe"] == RECIPE
    assert manifest["wheels"]["torch"].startswith("2.13.0")
    environment = cat(sqsh, "etc/environment").decode()
    assert "IMAGEBUILD_E2E=" in environment and "$HOME stays literal" in environment
    assert "PATH=/opt/venv/bin:" in environment
    assert (env["artifacts"] / f"{RECIPE}.sqsh.sha256").read_text().split()[0] == \
        __import__("hashlib").sha256(sqsh.read_bytes()).hexdigest()
    objects = sif_objects(env["artifacts"] / f"{RECIPE}.sif")
    assert any("Squashfs" in json.dumps(o) or "FS" in json.dumps(o) for o in objects), objects


def test_3b_build_squashed_without_export_and_export_agrees(env: dict, tmp_path: Path,
                                                           capsys) -> None:
    """`build --squash` read the image from the engine's storage (no `docker export`); the
    export path gives the same bytes (SBOM and runtime files included)."""
    record = json.loads((env["artifacts"] / f"{RECIPE}.artifacts.json").read_text())
    sqsh = next(a for a in record["artifacts"] if a["kind"] == "sqsh")
    assert sqsh["timings"]["read_by"].startswith("overlay2 storage, ")
    code = main(["squash", RECIPE, "--formats", "sqsh", "--read", "export",
                 "--output-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "read: docker export" in out
    assert (tmp_path / f"{RECIPE}.sqsh.sha256").read_text().split()[0] == sqsh["sha256"]


def test_4_edf_is_valid_toml(env: dict) -> None:
    edf = tomllib.loads((env["artifacts"] / f"{RECIPE}.toml").read_text())
    assert edf["image"].endswith(f"{RECIPE}.sqsh")
    assert isinstance(edf.get("env", {}), dict)
    # dotted keys, as CSCS documents them, are nested tables in TOML
    assert edf["annotations"]["com"]["hooks"]["cxi"]["enabled"] == "true"


def test_5_image_runs_torch(env: dict) -> None:
    out = docker_run("python", "-c", "import torch, sys; print(torch.__version__, sys.version)")
    assert out.startswith("2.13.0")
    assert "IMAGEBUILD_E2E=yes $HOME stays literal" in docker_run("env")


def test_6_validate_inside_the_image(env: dict, tmp_path: Path, capsys) -> None:
    report = tmp_path / "report.json"
    code, out, err = timed("validate --allow-cpu (in the image)", [
        "validate", RECIPE, "--allow-cpu", "--report", str(report)], capsys)
    print(out[-4000:])
    assert code == 0, err[-3000:]
    data = json.loads(report.read_text())
    checks = {c["name"]: c for c in data["checks"]}
    assert checks["environment"]["status"] == "passed"
    assert checks["train"]["status"] == "passed"
    assert checks["gemm"]["status"] == "skipped"


def test_7_second_build_is_a_no_op(env: dict, capsys) -> None:
    started = time.monotonic()
    code, out, err = timed("second build (no-op)", [
        "build", RECIPE, "--squash", "sqsh,sif", "--site", "cscs-beverin"], capsys)
    print(f"[e2e] no-op build took {time.monotonic() - started:.2f} s")
    assert code == 0, err
    assert "up to date" in out
    assert "artifacts of" in err and "are up to date" in err
    capsys.readouterr()  # the timing lines printed so far
    code, out, err = timed("third build (no-op, --json)", [
        "build", RECIPE, "--squash", "sqsh,sif", "--site", "cscs-beverin", "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["built"] is False and result["image"].startswith(f"imagebuild/{RECIPE}:")
    sqsh = next(a for a in result["artifacts"] if a["kind"] == "sqsh")
    assert Path(sqsh["path"]).stat().st_size == sqsh["size"] and len(sqsh["sha256"]) == 64


def test_7b_plan_says_which_stages_would_rebuild_and_why(env: dict, capsys) -> None:
    """--plan builds nothing: against the image just built, nothing; after an env edit (the
    lock stays valid), only the final stage, because its instructions changed."""
    code, out, _ = timed("build --plan (up to date)", ["build", RECIPE, "--plan"], capsys)
    assert code == 0 and "is up to date" in out and "nothing would build" in out
    recipe = env["project"] / "recipes" / f"{RECIPE}.yaml"
    original = recipe.read_text()
    image_id = env["engine"].image_id(IMAGE)
    try:
        recipe.write_text(original.replace("env:\n", "env:\n  IMAGEBUILD_PLANNED: one more\n", 1))
        code, out, _ = timed("build --plan (env edited)", ["build", RECIPE, "--plan"], capsys)
    finally:
        recipe.write_text(original)
    assert code == 0
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("STAGE "))
    table = lines[header + 1:]
    rows = {line.split()[0]: line for line in table if " would rebuild " not in line}
    assert set(rows) == {"base", "python", "final"}
    assert "reuse" in rows["base"] and "reuse" in rows["python"]
    assert "rebuild" in rows["final"] and "its instructions or build args changed" in rows["final"]
    assert f"1 of 3 stages would rebuild against {IMAGE}" in out
    assert env["engine"].image_id(IMAGE) == image_id  # nothing was built


def test_7c_a_stale_latest_is_refused_by_squash_and_validate(env: dict, capsys) -> None:
    """After a recipe edit the lock survives (env only), :latest is an older build: squash
    and validate of the recipe name refuse it, naming what to do, before any work."""
    recipe = env["project"] / "recipes" / f"{RECIPE}.yaml"
    original = recipe.read_text()
    try:
        recipe.write_text(original.replace("env:\n", "env:\n  IMAGEBUILD_STALE: \"edited\"\n", 1))
        for argv in (["squash", RECIPE, "--output-dir", str(env["project"] / "stale")],
                     ["validate", RECIPE, "--allow-cpu"]):
            code, _out, err = timed(" ".join(argv[:2]) + " (stale :latest)", argv, capsys)
            assert code == 2, err
            assert f"error: {IMAGE} is not the current build of {RECIPE} (built from inputs" in err
            assert f"hint: imagebuild build {RECIPE} first, or name the image itself" in err
        assert not (env["project"] / "stale").exists()
    finally:
        recipe.write_text(original)
    assert main(["squash", RECIPE, "--output-dir", str(env["project"] / "current"),
                 "--formats", "sqsh"]) == 0  # the same image, current again


def test_8_push_to_a_registry(env: dict, local_registry: str, capsys) -> None:
    code, out, err = timed("push", ["build", RECIPE, "--push", f"{local_registry}/e2e",
                                    "--site", "cscs-beverin"], capsys)
    assert code == 0, err
    tags = requests.get(f"http://{local_registry}/v2/e2e/imagebuild/{RECIPE}/tags/list",
                        timeout=10).json()["tags"]
    assert "latest" in tags
    # The Sarus Suite EDF names the pushed image by the digest the registry serves.
    pinned = next(line.split()[1] for line in out.splitlines() if line.startswith("pushed "))
    edf = tomllib.loads((env["artifacts"] / f"{RECIPE}.sarus.toml").read_text())
    assert edf["image"] == pinned and "@sha256:" in pinned
    name, digest = pinned.split("/", 1)[1].split("@")
    served = requests.head(f"http://{local_registry}/v2/{name}/manifests/{digest}", timeout=10,
                           headers={"Accept": "application/vnd.oci.image.manifest.v1+json, "
                                              "application/vnd.docker.distribution.manifest.v2+json"})
    assert served.status_code == 200 and served.headers["Docker-Content-Digest"] == digest
    assert "amd.com/gpu=all" in edf["devices"]
