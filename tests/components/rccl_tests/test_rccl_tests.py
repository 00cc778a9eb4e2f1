"""rccl-tests in the ROCm images: the recipe key, its lock pin, the stage the plan and the
Dockerfile make of it, and the stage's device-code check.

The check (components/rccl_tests/check.py) reads the clang offload bundles in an ELF's
.hip_fatbin section; here gcc builds ELF files carrying such bundles, written in the layout
clang's OffloadBundler writes. tests/components/network_plugin/test_plugin_stage.py builds the real benchmarks
with hipcc against Debian's RCCL 7.2.4 and runs the same check on them.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import zlib
from dataclasses import replace
from pathlib import Path

import pytest

from imagebuild.components.rccl_tests import component as rccl_tests
from imagebuild.components.shared import SOURCE_BUILD_PACKAGES
from imagebuild.errors import LockError, RecipeError
from imagebuild.lock.check import check_lock
from imagebuild.lock.lockfile import read_lock
from imagebuild.recipe.load import load_recipe
from imagebuild.render.dockerfile import render_dockerfile
from imagebuild.render.manifest import manifest
from imagebuild.render.plan import plan_for
from imagebuild.render.stages import stage_plan
from tests.components.conftest import REPO
from tests.support.render import parse_dockerfile, write_lock
from tests.support.scripts import staged

CHECK = staged(rccl_tests.CHECK, rccl_tests.FOLDER / "check.py")
BINARIES = [f"{name}_perf" for name in rccl_tests.COLLECTIVES]


@pytest.fixture
def rocm(tmp_path: Path):
    recipe = load_recipe("rocm-7.2.4", REPO)
    return recipe, write_lock(recipe, tmp_path / "pylock.rocm-7.2.4.toml")


# --- recipe and lock ----------------------------------------------------------------------------

def test_shipped_recipes_build_rccl_tests_from_develop() -> None:
    recipe = load_recipe("rocm-7.0.2", REPO)
    tests = rccl_tests.section(recipe)
    assert tests is not None
    assert tests.source.repository == "https://github.com/ROCm/rccl-tests.git"
    assert tests.source.ref == "develop"
    assert recipe.lock_inputs()["rccl_tests"] == {
        "repository": "https://github.com/ROCm/rccl-tests.git", "ref": "develop"}


def test_recipes_without_it_keep_their_hashes() -> None:
    recipe = load_recipe("rocm-7.0.2", REPO)
    off = recipe.with_component("rccl_tests", None)
    assert "rccl_tests" not in off.to_dict() and "rccl_tests" not in off.lock_inputs()
    assert off.input_hash() != recipe.input_hash()


def _recipe(tmp_path: Path, body: str, base: str = "rocm: 7.2.4\nbase_image: b:1\n") -> Path:
    path = tmp_path / "r.yaml"
    path.write_text("version: 1\n" + base + "wheels:\n  index_url: https://example.org/\n"
                    "  packages:\n    torch: 2.9.1\n" + body)
    return path


SECTION = ("rccl_tests:\n  enabled: true\n  repository: https://github.com/ROCm/rccl-tests.git\n"
           "  ref: develop\n")


@pytest.mark.parametrize(("body", "base", "problem"), [
    ("gpu_targets: [gfx942]\nrccl_tests:\n  enabled: true\n  ref: develop\n", None,
     "rccl_tests.repository: missing (required when rccl_tests.enabled is true)"),
    (SECTION, None, "rccl_tests.enabled: needs gpu_targets"),
    ("gpu_targets: [gfx942]\n" + SECTION, "rocm: null\nbase_image: b:1\n",
     "rccl_tests.enabled: needs a ROCm release"),
    ("gpu_targets: [gfx942]\n" + SECTION.replace("ref: develop", "ref: 'develop; rm -rf /'"),
     None, "rccl_tests.ref"),
])
def test_bad_sections_are_refused(tmp_path: Path, body: str, base: str | None,
                                  problem: str) -> None:
    path = _recipe(tmp_path, body, *(() if base is None else (base,)))
    with pytest.raises(RecipeError) as caught:
        load_recipe(str(path))
    assert problem in str(caught.value)


def test_the_lock_pins_a_commit_and_check_lock_wants_it(rocm, tmp_path: Path) -> None:
    recipe, lock = rocm
    tests = lock.git("rccl-tests")
    assert tests is not None and len(tests.commit) == 40
    assert tests.ref == "develop"
    text = lock.path.read_text()
    assert "[tool.imagebuild.sources.rccl-tests]" in text
    assert read_lock(lock.path).git("rccl-tests") == tests
    check_lock(recipe, lock)
    others = {key: source for key, source in lock.sources.items() if key != "rccl-tests"}
    with pytest.raises(LockError, match=r"\[tool.imagebuild.sources.rccl-tests\] missing"):
        check_lock(recipe, replace(lock, sources=others))
    with pytest.raises(LockError, match="rccl-tests commit 'develop' is not 40 hex"):
        check_lock(recipe, replace(lock, sources={
            **others, "rccl-tests": replace(tests, commit="develop")}))


# --- plan and Dockerfile ------------------------------------------------------------------------

def test_the_stage_builds_the_locked_commit_for_the_recipes_targets(rocm) -> None:
    recipe, lock = rocm
    recipe = replace(recipe, gpu_targets=("gfx90a", "gfx942"))
    plan = plan_for(recipe, lock)
    assert rccl_tests.planned(plan.parts) is not None
    stages = parse_dockerfile(render_dockerfile(plan))
    stage = stages["rccl-tests"]
    assert stage.uses == {"toolchain"} and "rccl-tests" in stages["final"].uses
    tests = lock.git("rccl-tests")
    assert tests is not None and f"fetch -q --depth 1 origin {tests.commit}" in stage.text
    assert ("HIPCC='/opt/rocm/bin/hipcc --offload-arch=gfx90a --offload-arch=gfx942'\"$compat\""
            in stage.text)
    # AMD's images: ROCm under /opt/rocm, hipify-perl beside hipcc, not on the base's PATH
    assert "NCCL_HOME=/opt/rocm ROCM_PATH=/opt/rocm" in stage.text
    assert "PATH=/opt/rocm/bin:\"$PATH\" make" in stage.text
    assert "--targets gfx90a,gfx942 --binaries " + ",".join(BINARIES) in stage.text
    assert "MPI=1" not in stage.text
    assert ("rccl-tests", "toolchain + rccl-tests' *_perf benchmarks",
            "rccl-tests repository/commit, GPU targets") in stage_plan(plan_for(recipe, None))


def test_debian_rocm_under_usr_leaves_rocm_path_unset(rocm) -> None:
    """hipcc with ROCM_PATH=/usr looks for the device libraries in the wrong place."""
    recipe, lock = rocm
    plan = plan_for(replace(recipe, rocm_prefix="/usr"), lock)
    planned = rccl_tests.planned(plan.parts)
    assert planned is not None and planned.rocm_path is None
    text = parse_dockerfile(render_dockerfile(plan))["rccl-tests"].text
    assert "ROCM_PATH" not in text
    assert "NCCL_HOME=/usr " in text and "HIPCC='/usr/bin/hipcc --offload-arch=" in text
    assert "rccl_h=/usr/include/rccl/rccl.h" in text


def test_compatibility_flags_are_decided_from_the_sources_and_the_rccl(rocm) -> None:
    recipe, lock = rocm
    text = parse_dockerfile(render_dockerfile(plan_for(recipe, lock)))["rccl-tests"].text
    fp8 = text.index("-DncclFp8E4M3=ncclFloat8e4m3")
    assert text.rindex("grep -qw ncclFp8E4M3 src/common.h", 0, fp8) > 0
    assert text.rindex('grep -qw ncclFloat8e4m3 "$rccl_h"', 0, fp8) > 0
    cstring = text.index('compat="$compat -include cstring"')
    assert text.rindex("#include <(cstring|string", 0, cstring) > fp8


def test_the_final_stage_copies_checks_and_puts_the_benchmarks_on_path(rocm) -> None:
    recipe, lock = rocm
    plan = plan_for(recipe, lock)
    binaries = [f"/opt/rccl-tests/bin/{name}" for name in BINARIES]
    assert set(binaries) <= set(plan.linked_files)
    assert all(package in plan.build_packages for package in SOURCE_BUILD_PACKAGES)
    final = parse_dockerfile(render_dockerfile(plan))["final"]
    assert "COPY --from=rccl-tests /opt/rccl-tests /opt/rccl-tests" in final.instructions
    ldd = next(i for i in final.instructions if " ldd " in i)
    assert all(binary in ldd for binary in binaries)
    env = next(i for i in final.instructions if i.startswith("ENV VIRTUAL_ENV="))
    assert 'PATH="/opt/venv/bin:${PATH}:/opt/rccl-tests/bin:/opt/rccl-tuner/bin"' in env
    profile = next(i for i in final.instructions if "zz-imagebuild-path.sh" in i)
    assert "PATH='/opt/venv/bin:$PATH:/opt/rccl-tests/bin:/opt/rccl-tuner/bin'" in profile


def test_the_manifest_records_the_pin_and_the_binaries(rocm) -> None:
    recipe, lock = rocm
    entry = manifest(plan_for(recipe, lock))["rccl_tests"]
    tests = lock.git("rccl-tests")
    assert tests is not None and entry["enabled"] and entry["commit"] == tests.commit
    assert entry["gpu_targets"] == list(recipe.gpu_targets)
    assert entry["bin"] == "/opt/rccl-tests/bin"
    assert entry["binaries"] == [f"/opt/rccl-tests/bin/{name}" for name in BINARIES]


# --- the device-code check ----------------------------------------------------------------------

def bundle(*entries: tuple[str, bytes]) -> bytes:
    """An uncompressed clang offload bundle (clang/lib/Driver/OffloadBundler.cpp)."""
    header = b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(entries))
    size = len(header) + sum(24 + len(name) for name, _ in entries)
    table, body = b"", b""
    for name, code in entries:
        table += struct.pack("<QQQ", size + len(body), len(code), len(name)) + name.encode()
        body += code
    return header + table + body


def compressed(inner: bytes) -> bytes:
    """The same bundle compressed with zlib, format version 2 (``--offload-compress``)."""
    payload = zlib.compress(inner)
    return (b"CCOB" + struct.pack("<HHII", 2, 0, 24 + len(payload), len(inner))
            + struct.pack("<Q", 0) + payload)


def fatbin_elf(path: Path, *bundles: bytes) -> Path:
    """An executable whose .hip_fatbin section holds ``bundles``, 4096-aligned as hipcc's."""
    blob = b""
    for item in bundles:
        blob += item + b"\0" * (-len(item) % 4096)
    data = ", ".join(str(b) for b in blob)
    source = path.with_suffix(".c")
    source.write_text('__attribute__((section(".hip_fatbin"), used, aligned(4096)))\n'
                      f"static const unsigned char fatbin[] = {{{data}}};\n"
                      "int main(void) { return 0; }\n")
    subprocess.run(["gcc", "-o", str(path), str(source)], check=True, capture_output=True)
    return path


def device(target: str) -> tuple[str, bytes]:
    return (f"hipv4-amdgcn-amd-amdhsa--{target}", b"\x7fELF device code " + target.encode())


HOST = ("host-x86_64-unknown-linux-gnu-", b"")


def run_check(bin_dir: Path, targets: str, binaries: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHECK), str(bin_dir), "--targets", targets,
                           "--binaries", binaries], check=False, capture_output=True, text=True)


needs_gcc = pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc")


@needs_gcc
def test_exactly_the_recipes_targets_pass(tmp_path: Path) -> None:
    # Two bundles, as hipcc links one per translation unit with device code.
    code = bundle(HOST, device("gfx90a"), device("gfx942"))
    fatbin_elf(tmp_path / "all_reduce_perf", code, code)
    fatbin_elf(tmp_path / "sendrecv_perf", compressed(code))
    checked = run_check(tmp_path, "gfx942,gfx90a", "all_reduce_perf,sendrecv_perf")
    assert checked.returncode == 0, checked.stderr
    assert "all_reduce_perf: device code for gfx90a, gfx942" in checked.stdout
    assert "sendrecv_perf: device code for gfx90a, gfx942" in checked.stdout


@needs_gcc
def test_a_missing_or_an_extra_target_fails(tmp_path: Path) -> None:
    fatbin_elf(tmp_path / "all_reduce_perf", bundle(HOST, device("gfx942"), device("gfx1100")))
    checked = run_check(tmp_path, "gfx90a,gfx942", "all_reduce_perf")
    assert checked.returncode == 1
    assert ("all_reduce_perf: device code for gfx1100, gfx942; missing gfx90a; not asked for "
            "gfx1100") in checked.stderr
    assert "not built for exactly gfx90a, gfx942" in checked.stderr


@needs_gcc
def test_a_missing_binary_and_one_without_device_code_fail(tmp_path: Path) -> None:
    source = tmp_path / "plain.c"
    source.write_text("int main(void) { return 0; }\n")
    subprocess.run(["gcc", "-o", str(tmp_path / "gather_perf"), str(source)], check=True)
    checked = run_check(tmp_path, "gfx942", "gather_perf,scatter_perf")
    assert checked.returncode == 1
    assert "gather_perf: device code for no GPU; missing gfx942" in checked.stderr
    assert f"scatter_perf: not built (no {tmp_path}/scatter_perf)" in checked.stderr
