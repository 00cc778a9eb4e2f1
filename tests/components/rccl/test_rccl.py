"""RCCL pinned apart from the base image: the recipe section, the lock pin, the stage and the
final-stage precedence the plan renders, and the build-time check run for real on a stand-in
librccl.so.1 and consumers compiled here with gcc (a torch-like library and an
rccl-tests-like binary, linked against a "base image" RCCL): the check passes only when the
loader resolves every consumer to the pinned library.

Not shown here: RCCL's own build (hours of hipcc for its device code; a big-runner job like
hipBLASLt's) and its run on a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from imagebuild.components.rccl import component as rccl
from imagebuild.errors import RecipeError
from imagebuild.recipe.load import load_recipe
from imagebuild.recipe.model import GitSource
from imagebuild.render.dockerfile import render_dockerfile
from imagebuild.render.manifest import manifest
from imagebuild.render.plan import plan_for
from tests.components.conftest import REPO
from tests.support.render import parse_dockerfile, write_lock
from tests.support.scripts import staged

CHECK = staged(rccl.CHECK, rccl.FOLDER / "check.py")
PINNED = rccl.Rccl(True, GitSource("https://github.com/ROCm/rccl.git", "rocm-7.1.1"))


def test_shipped_recipes_keep_the_base_images_rccl() -> None:
    assert rccl.section(load_recipe("rocm-7.2.4", REPO)) is None


def test_a_section_without_a_ref_or_on_a_cpu_image_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    base = ("version: 1\nrocm: {rocm}\nbase_image: b:1\nwheels:\n  index_url: https://e.org/\n"
            "  packages:\n    torch: 2.9.1\nrccl:\n  enabled: true\n"
            "  repository: https://github.com/ROCm/rccl.git\n")
    path.write_text(base.format(rocm="7.2.4"))
    with pytest.raises(RecipeError, match="rccl.ref: missing"):
        load_recipe(str(path))
    path.write_text(base.format(rocm="null") + "  ref: rocm-7.1.1\n")
    with pytest.raises(RecipeError, match="rccl.enabled: needs a ROCm release"):
        load_recipe(str(path))


def test_the_plan_builds_the_locked_commit_for_gpu_targets_first_on_the_loader_path(
        tmp_path: Path) -> None:
    recipe = load_recipe("rocm-7.2.4", REPO).with_component("rccl", PINNED)
    lock = write_lock(recipe, tmp_path / "pylock.rocm-7.2.4.toml")
    locked = lock.git("rccl")
    assert locked is not None and locked.ref == "rocm-7.1.1"
    plan = plan_for(recipe, lock)
    stages = parse_dockerfile(render_dockerfile(plan))
    stage = " ".join(stages["rccl"].text.split())
    assert f"fetch -q --depth 1 origin {locked.commit} " in stage
    assert "-DGPU_TARGETS='gfx90a;gfx942'" in stage and "-DBUILD_TESTS=OFF" in stage
    assert 'limit="$(cat /sys/fs/cgroup/memory.max' in stage
    final = " ".join(stages["final"].text.split())
    assert "COPY --from=rccl /opt/rccl /opt/rccl" in final
    assert "/opt/rccl/lib > /etc/ld.so.conf.d/imagebuild-rccl.conf" in final
    env = next(i for i in stages["final"].instructions if i.startswith("ENV VIRTUAL_ENV="))
    assert 'LD_LIBRARY_PATH="/opt/hipblaslt/lib:/opt/rccl/lib:' in env
    assert ("LD_LIBRARY_PATH=/opt/hipblaslt/lib:/opt/rccl/lib:/opt/aws-ofi-nccl/lib "
            "/opt/venv/bin/python /tmp/imagebuild/rccl-check.py /opt/rccl/lib --search "
            "/opt/venv --search /opt --manifest") in final
    # The check runs after rccl-tests and the venv are in place.
    assert final.index("rccl-check.py") > final.index("COPY --from=rccl-tests")
    data = manifest(plan)["rccl"]
    assert data["commit"] == locked.commit and data["library"] == "/opt/rccl/lib/librccl.so.1"
    [source] = plan.parts["rccl"].sources
    assert source.pin == locked and source.name == "rccl"
    other = replace(PINNED, source=GitSource(PINNED.source.repository, "develop"))
    assert recipe.with_component("rccl", other).lock_input_hash() != recipe.lock_input_hash()


# --- the check, on a stand-in RCCL and consumers compiled here -----------------------------------

def _cc(*args: str | Path) -> None:
    subprocess.run(["gcc", "-O1", *map(str, args)], check=True, capture_output=True, text=True)


def _librccl(directory: Path, which: str) -> Path:
    directory.mkdir(parents=True)
    source = directory / "rccl.c"
    source.write_text(f'const char* ncclGetVersionName(void) {{ return "{which}"; }}\n')
    _cc("-shared", "-fPIC", "-Wl,-soname,librccl.so.1", "-o", directory / "librccl.so.1", source)
    (directory / "librccl.so").symlink_to("librccl.so.1")
    return directory


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A base RCCL, the pinned one, and under opt/: a torch-like library and an
    rccl-tests-like binary linked against the base one, and a library with a DT_RPATH to it."""
    root = tmp_path_factory.mktemp("image")
    base = _librccl(root / "base", "base")
    pinned = _librccl(root / "opt" / "rccl" / "lib", "pinned")
    consumer = root / "consumer.c"
    consumer.write_text("const char* ncclGetVersionName(void);\n"
                        "const char* which(void) { return ncclGetVersionName(); }\n"
                        "int main(void) { return which()[0] == 'p' ? 0 : 1; }\n")
    torch_lib = root / "opt" / "venv" / "torch" / "lib"
    torch_lib.mkdir(parents=True)
    _cc("-shared", "-fPIC", "-o", torch_lib / "libtorch_hip.so", consumer, f"-L{base}", "-lrccl")
    bench = root / "opt" / "rccl-tests" / "bin"
    bench.mkdir(parents=True)
    _cc("-o", bench / "all_reduce_perf", consumer, f"-L{base}", "-lrccl")
    rpath = root / "rpath"
    rpath.mkdir()
    _cc("-shared", "-fPIC", "-o", rpath / "libpinned_by_rpath.so", consumer, f"-L{base}",
        "-lrccl", f"-Wl,-rpath,{base}", "-Wl,--disable-new-dtags")
    return {"root": root, "base": base, "pinned": pinned, "rpath": rpath}


def _check(image: dict[str, Path], tmp_path: Path, loader_path: list[Path],
           *search: Path) -> subprocess.CompletedProcess[str]:
    manifest_file = tmp_path / "manifest.json"
    manifest_file.write_text("{}")
    argv = [sys.executable, str(CHECK), str(image["pinned"])]
    for directory in search or (image["root"] / "opt",):
        argv += ["--search", str(directory)]
    # As in the final stage, which keeps no binutils: a readelf that fails if called.
    tools = tmp_path / "no-binutils"
    tools.mkdir(exist_ok=True)
    (tools / "readelf").write_text("#!/bin/sh\necho 'no readelf in the final stage' >&2\nexit 1\n")
    (tools / "readelf").chmod(0o755)
    env = {**os.environ, "LD_LIBRARY_PATH": ":".join(map(str, loader_path)),
           "PATH": f"{tools}:{os.environ['PATH']}"}
    return subprocess.run([*argv, "--manifest", str(manifest_file)], env=env,
                          capture_output=True, text=True, check=False)


def test_consumers_resolving_the_pinned_rccl_pass_and_are_recorded(image, tmp_path: Path) -> None:
    done = _check(image, tmp_path, [image["pinned"], image["base"]])
    assert done.returncode == 0, done.stderr
    recorded = json.loads((tmp_path / "manifest.json").read_text())["rccl"]
    pinned = str(image["pinned"] / "librccl.so.1")
    assert recorded["consumers"] == {
        str(image["root"] / "opt" / "rccl-tests" / "bin" / "all_reduce_perf"): pinned,
        str(image["root"] / "opt" / "venv" / "torch" / "lib" / "libtorch_hip.so"): pinned}
    # and the binary really runs with the pinned one (its main returns 0 only then)
    run = subprocess.run([str(image["root"] / "opt" / "rccl-tests" / "bin" / "all_reduce_perf")],
                         env={"LD_LIBRARY_PATH": f"{image['pinned']}:{image['base']}"},
                         check=False)
    assert run.returncode == 0


def test_the_base_images_rccl_first_fails_naming_each_consumer(image, tmp_path: Path) -> None:
    done = _check(image, tmp_path, [image["base"], image["pinned"]])
    assert done.returncode == 1
    assert "2 of 2 consumers do not load the pinned" in done.stderr
    assert f"all_reduce_perf -> {image['base'] / 'librccl.so.1'}" in done.stderr


def test_an_rpath_to_another_rccl_wins_over_the_loader_path_and_fails(image,
                                                                      tmp_path: Path) -> None:
    done = _check(image, tmp_path, [image["pinned"]], image["rpath"])
    assert done.returncode == 1
    assert f"libpinned_by_rpath.so -> {image['base'] / 'librccl.so.1'}" in done.stderr


def test_no_consumer_at_all_is_refused(image, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    done = _check(image, tmp_path, [image["pinned"]], empty)
    assert done.returncode == 1 and "would be loaded by no one" in done.stderr


def test_the_plugins_checks_read_the_pinned_rccls_lookups(tmp_path: Path) -> None:
    """The network plugin and the tuner run inside whichever RCCL dlopens them: with RCCL
    pinned, their stages' checks read the pinned library's interface lookups (mounted from the
    rccl stage), not the base image's."""
    recipe = load_recipe("rocm-7.2.4", REPO)
    lock = write_lock(recipe.with_component("rccl", PINNED), tmp_path / "pylock.toml")
    for with_rccl, where in ((True, "/opt/rccl"), (False, "/opt/rocm")):
        changed = recipe.with_component("rccl", PINNED if with_rccl else None)
        stages = parse_dockerfile(render_dockerfile(plan_for(changed, lock)))
        for stage in ("plugin", "rccl-tuner"):
            text = " ".join(stages[stage].text.split())
            assert f"--rccl {where} " in text, stage
            assert ("--mount=type=bind,from=rccl,source=/opt/rccl,target=/opt/rccl" in text) \
                == with_rccl, stage
            assert ("rccl" in stages[stage].uses) == with_rccl, stage
