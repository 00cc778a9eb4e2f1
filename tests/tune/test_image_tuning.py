"""The tuning loop with the CPU demo image on a real Docker engine: the in-image `imagebuild
tune` steps run through the image's own shim, a bundle applied at run time by `imagebuild
validate --tuning` (docker launcher), and `imagebuild build --tuning`: a derived image one
layer on top of the recipe's, every step of the recipe's stages from the build cache.

The bundle is written here the way `imagebuild tune gemm` writes one on a GPU (with this
image's recipe and torch): on CPU nothing can be tuned, and the in-image step says so.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.images import BUILD_HASH_LABEL, latest_tag
from imagebuild.inimage.model.llama import LLAMA_CPU_SMOKE
from imagebuild.inimage.tuning.record import record_local
from imagebuild.tune.bundle import bundle_digest, read_bundle
from imagebuild.tune.derive import BASE_LABEL, BUNDLE_LABEL
from testbed.cpu_recipe import write_recipe
from tests.e2e.conftest import wheel_index  # noqa: F401  (pytest fixture)
from tests.inimage.checks.test_tuning_in_effect import cpu_bundle
from tests.support import engine_env
from tests.support.squashfs import cat
from tests.support.validate import check

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

docker_engine = engine_env.docker_engine
local_registry = engine_env.local_registry
base_image = engine_env.base_image
registry_base_image = engine_env.registry_base_image

#: Its own recipe name: the end-to-end tests' cpu-e2e tags stay theirs.
RECIPE = "cpu-tuning"
IMAGE = latest_tag(RECIPE)
SITE = "cscs-beverin"
MOUNT = "/opt/imagebuild/tuning"
SEQ = 32


@pytest.fixture(scope="module")
def world(tmp_path_factory, registry_base_image, wheel_index, docker_engine):  # noqa: F811
    root = tmp_path_factory.mktemp("tuning-project")
    write_recipe(root, RECIPE, registry_base_image)
    with engine_env.imagebuild_env(root, tmp_path_factory.mktemp("cache")):
        yield {"project": root, "index": wheel_index.url_for("cpu/"), "engine": docker_engine,
               "artifacts": root / "artifacts", "tmp": tmp_path_factory.mktemp("tuning")}


def timed(label: str, argv: list[str], capsys) -> tuple[int, str, str]:
    started = time.monotonic()
    code = main(argv)
    out, err = capsys.readouterr()
    print(f"\n[tuning] {label}: {time.monotonic() - started:.1f} s (exit {code})")
    return code, out, err


def docker(*args: str, check_: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/usr/bin/docker", *args], capture_output=True, text=True,
                          check=check_, timeout=600)


def locked_torch(project: Path) -> str:
    import tomllib

    lock = tomllib.loads((project / "recipes" / f"pylock.{RECIPE}.toml").read_text())
    return next(p["version"] for p in lock["packages"] if p["name"] == "torch")


def test_1_lock_and_build_the_recipe(world, capsys):
    code, _, err = timed("lock", ["lock", RECIPE, "--index-url", world["index"]], capsys)
    assert code == 0, err
    code, out, err = timed("build", ["build", RECIPE], capsys)
    assert code == 0, err[-3000:]
    print(out)


def test_2_tune_shapes_in_the_image_from_a_real_cpu_step(world):
    """`imagebuild tune shapes --local` through the image's shim: the checks staged into
    the build context profile a real CPU training step of the validation model in the
    image's torch and write the problems CSV; the same step profiled here gives the same
    problems (shapes, transposes, types, counts)."""
    work = world["tmp"] / "shapes"
    work.mkdir(mode=0o777)
    proc = docker("run", "--rm", "--network", "host", "-v", f"{work}:/work", "-w", "/work",
                  IMAGE, "imagebuild", "tune", "shapes", "--local", "--seq", str(SEQ),
                  "--out", "/work/problems.csv", check_=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "15 problems" in proc.stdout and "reduced proxy of Llama-3.1-8B" in proc.stdout
    rows = list(csv.DictReader((work / "problems.csv").read_text().splitlines()))
    in_image = sorted((r["m"], r["n"], r["k"], r["batch_count"], r["transA"], r["transB"],
                       r["a_type"], r["compute_type"], r["count"]) for r in rows)
    stats, _ = record_local(world["tmp"] / "host-record", seq=SEQ)
    here = sorted((str(s.problem.m), str(s.problem.n), str(s.problem.k),
                   str(s.problem.batch_count), s.problem.trans_a, s.problem.trans_b,
                   s.problem.a_type, s.problem.compute_type, str(s.count)) for s in stats)
    assert in_image == here
    assert {r["transA"] + r["transB"] for r in rows} == {"TN", "NN", "NT"}
    assert int(rows[0]["k"]) in (LLAMA_CPU_SMOKE.dim, LLAMA_CPU_SMOKE.ffn_dim, SEQ)
    assert (work / "record" / "trace.json").is_file()

    # The next step in the image: nothing to tune without a GPU, and it says so.
    proc = docker("run", "--rm", "--network", "host", "-v", f"{work}:/work", "-w", "/work",
                  IMAGE, "imagebuild", "tune", "gemm", "/work/problems.csv", "--out",
                  "/work/bundle", check_=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "tunableop: skipped: GPU-only" in proc.stdout
    assert "nothing tuned: GPU-only" in proc.stdout
    record = json.loads((work / "bundle" / "gemm_tuning.json").read_text())
    assert record["facts"] == {"gpu": None} and record["problems"] == []


@pytest.fixture(scope="module")
def bundle(world) -> Path:
    directory = world["tmp"] / "bundle"
    cpu_bundle(directory, recipe=RECIPE, torch_version=locked_torch(world["project"]))
    return directory


def test_3_validate_mounts_and_loads_the_bundle(world, bundle, capsys):
    """The docker launcher binds the bundle read-only and sets its variables; the in-image
    tuning check finds it there, matched against the image's manifest and torch."""
    report = world["tmp"] / "tuned-report.json"
    code, out, err = timed("validate --tuning (docker)", [
        "validate", RECIPE, "--tuning", str(bundle), "--checks", "environment,tuning",
        "--allow-cpu", "--report", str(report)], capsys)
    assert code == 0, out + err
    data = json.loads(report.read_text())
    assert data["runtime"] == "docker"
    result = check(data, "tuning")
    assert result["status"] == "skipped" and result["cause"] == "no_gpu"
    figures = result["figures"]
    assert figures["bundle"] == MOUNT
    assert figures["matched_against"] == {"recipe": RECIPE,
                                          "torch_version": locked_torch(world["project"])}
    assert figures["run_env_loads_bundle"] is True
    assert figures["run_env"]["PYTORCH_TUNABLEOP_FILENAME"] == f"{MOUNT}/tunableop_results.csv"
    assert "it matches (recipe cpu-tuning, torch_version" in result["reason"]


def test_4_bundles_of_another_build_are_refused(world, bundle, capsys):
    other = world["tmp"] / "other-torch"
    cpu_bundle(other, recipe=RECIPE, torch_version="2.8.0+rocm7.0.2")
    # The recipe is known here: refused before any container starts.
    code, _, err = timed("validate, bundle of another torch", [
        "validate", RECIPE, "--tuning", str(other), "--checks", "tuning", "--allow-cpu"],
        capsys)
    assert code == 2 and "torch_version: bundle has '2.8.0+rocm7.0.2'" in err
    # An image reference says nothing here: the check in the image refuses it.
    report = world["tmp"] / "refused.json"
    code, out, err = timed("validate IMAGE, bundle of another torch", [
        "validate", IMAGE, "--tuning", str(other), "--checks", "tuning", "--allow-cpu",
        "--report", str(report)], capsys)
    assert code == 1, out + err
    result = check(json.loads(report.read_text()), "tuning")
    assert result["status"] == "failed"
    assert "torch_version: bundle has '2.8.0+rocm7.0.2'" in result["reason"]
    # build --tuning: refused before anything is built.
    wrong = world["tmp"] / "other-recipe"
    cpu_bundle(wrong, recipe="rocm-7.0.2", torch_version=locked_torch(world["project"]))
    code, _, err = timed("build --tuning, bundle of another recipe", [
        "build", RECIPE, "--tuning", str(wrong)], capsys)
    assert code == 2 and "recipe: bundle has 'rocm-7.0.2', target has 'cpu-tuning'" in err


def dockerfile_steps(project: Path) -> int:
    """RUN/COPY/ADD instructions of the recipe's rendered Dockerfile: every one a step."""
    text = (project / "dockerfiles" / RECIPE / "Dockerfile").read_text()
    return len(re.findall(r"^(RUN|COPY|ADD)\b", text, re.MULTILINE))


def test_5_build_with_the_bundle_bakes_one_layer(world, bundle, capsys):
    code, out, err = timed("build --tuning --squash sqsh", [
        "build", RECIPE, "--tuning", str(bundle), "--squash", "sqsh", "--site", SITE], capsys)
    assert code == 0, err[-3000:]
    print(out)
    match = re.search(r"^tuned image (\S+) \(\S+\) built: (\d+) steps cached, (\d+) built",
                      out, re.MULTILINE)
    assert match, out
    tag, cached, built = match[1], int(match[2]), int(match[3])
    steps = dockerfile_steps(world["project"])
    print(f"[tuning] derived build: {cached} steps cached of {steps} Dockerfile steps, "
          f"{built} built")
    assert cached == steps  # every step of the recipe's stages came from the cache
    assert built == 1  # the COPY of the bundle
    assert "COPY tuning/ /opt/imagebuild/tuning/" in err

    engine = world["engine"]
    digest = bundle_digest(bundle)
    base_hash = engine.image_labels(IMAGE)[BUILD_HASH_LABEL]
    assert tag == f"imagebuild/{RECIPE}:{base_hash[7:19]}-tuned-{digest[7:19]}"
    base_layers = engine.inspect(IMAGE)["RootFS"]["Layers"]
    layers = engine.inspect(tag)["RootFS"]["Layers"]
    assert layers[:-1] == base_layers and len(layers) == len(base_layers) + 1
    labels = engine.image_labels(tag)
    base_ref = re.search(r"^image (\S+) ", out, re.MULTILINE)[1]
    assert labels[BUNDLE_LABEL] == digest and labels[BASE_LABEL] == base_ref
    assert engine.image_id(base_ref) == engine.image_id(IMAGE)
    env = docker("run", "--rm", tag, "env").stdout.splitlines()
    assert f"PYTORCH_TUNABLEOP_FILENAME={MOUNT}/tunableop_results.csv" in env
    assert "PYTORCH_TUNABLEOP_TUNING=0" in env
    baked = json.loads(docker("run", "--rm", tag, "cat", f"{MOUNT}/tuning.json").stdout)
    assert baked["recipe"] == RECIPE
    # In the derived image, the in-image verify step finds its own bundle loaded.
    proc = docker("run", "--rm", tag, "imagebuild", "tune", "verify", MOUNT, "--allow-cpu")
    assert "skipped: GPU-only" in proc.stdout
    assert "this run's environment loads it" in proc.stdout

    # Its own artifacts: the squashfs holds the bundle, the EDF points at it.
    sqsh = world["artifacts"] / f"{RECIPE}-tuned.sqsh"
    assert json.loads(cat(sqsh, "opt/imagebuild/tuning/tuning.json")) == baked
    edf = (world["artifacts"] / f"{RECIPE}-tuned.toml").read_text()
    assert f"{RECIPE}-tuned.sqsh" in edf
    assert read_bundle(bundle).files == {"tunableop": "tunableop_results.csv"}

    # Nothing changed: nothing to build, artifacts reused.
    code, out, err = timed("build --tuning again", [
        "build", RECIPE, "--tuning", str(bundle), "--squash", "sqsh", "--site", SITE], capsys)
    assert code == 0, err
    assert re.search(r"^tuned image \S+ \(\S+\) up to date", out, re.MULTILINE), out
    assert "are up to date" in err


def test_6_tune_edf_mounts_the_bundle_on_the_recipe_squashfs(world, bundle, capsys):
    code, _, err = timed("squash", ["squash", RECIPE, "--site", SITE], capsys)
    assert code == 0, err
    code, _, err = timed("tune edf", ["tune", "edf", str(bundle), RECIPE, "--site", SITE],
                           capsys)
    assert code == 0, err
    import tomllib

    edf = tomllib.loads((world["artifacts"] / f"{RECIPE}-tuning.toml").read_text())
    assert f"{bundle.resolve()}:{MOUNT}:ro" in edf["mounts"]
    assert edf["env"]["PYTORCH_TUNABLEOP_ENABLED"] == "1"
    assert edf["image"].endswith(f"{RECIPE}.sqsh")
