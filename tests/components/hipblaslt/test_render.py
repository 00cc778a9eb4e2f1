"""What the shipped recipes render for hipBLASLt: one library, the one torch loads.

The decision comes from the torch pin alone: 6.4.4's wheel (2.8.0+rocm6.4.4.gitc1404424)
bundles its libhipblaslt in torch/lib, the ".lw" wheels of 7.x link the system ROCm's. The
monorepo fetch and the Tensile job cap are run for real here (a local git repository laid
out like rocm-libraries; the job formula against this machine and fabricated limits).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from imagebuild.components.hipblaslt import component as hipblaslt
from imagebuild.components.hipblaslt.component import torch_hipblaslt
from imagebuild.errors import RenderError
from imagebuild.recipe.load import load_recipe
from imagebuild.recipe.model import Wheels
from imagebuild.render.context import build_context
from imagebuild.render.dockerfile import render_dockerfile
from imagebuild.render.manifest import manifest
from imagebuild.render.plan import plan_for
from tests.components.conftest import REPO
from tests.support.render import committed_plan, parse_dockerfile, write_lock


def stages(name: str) -> dict:
    return parse_dockerfile(render_dockerfile(committed_plan(load_recipe(name, REPO))))


def run_instruction(stage, marker: str) -> str:
    """The shell command of the stage's RUN that contains ``marker``, mounts stripped."""
    run = next(i for i in stage.instructions if i.startswith("RUN") and marker in i)
    return re.sub(r"^RUN\s+(--mount=\S+\s+)*", "", re.sub(r"\s+", " ", run))


@pytest.mark.parametrize(("version", "links"), [
    ("2.8.0+rocm7.0.2.lw.git245bf6ed", "system"),
    ("2.9.1+rocm7.1.1.lw.git351ff442", "system"),
    ("2.8.0+rocm6.4.4.gitc1404424", "bundled"),
    ("2.8.0+rocm6.4", "bundled"),   # pytorch.org's ROCm wheels bundle ROCm too
    ("2.8.0+rocm6.4.4.lwx.gitc1404424", "bundled"),
])
def test_which_library_a_torch_wheel_loads(version: str, links: str):
    assert torch_hipblaslt(version) == links


def test_644_points_its_bundling_torch_at_the_built_library():
    plan = committed_plan(load_recipe("rocm-6.4.4", REPO))
    planned = hipblaslt.planned(plan.parts)
    assert planned is not None
    assert (planned.torch_links, planned.replaces) == ("bundled", "torch/lib")
    final = stages("rocm-6.4.4")["final"]
    link = run_instruction(final, "hipblaslt-check.py link")
    assert link.endswith("hipblaslt-check.py link /opt/hipblaslt/lib --into-torch")
    text = render_dockerfile(plan)
    assert "torch 2.8.0+rocm6.4.4.gitc1404424\n# is not a \".lw\" wheel: it bundles" in text


@pytest.mark.parametrize("name", ["rocm-7.0.2", "rocm-7.1.1"])
def test_7x_lw_wheels_get_the_built_library_in_the_rocm_prefix(name: str):
    plan = committed_plan(load_recipe(name, REPO))
    planned = hipblaslt.planned(plan.parts)
    assert planned is not None
    assert (planned.torch_links, planned.replaces) == ("system", "/opt/rocm/lib")
    final = stages(name)["final"]
    link = run_instruction(final, "hipblaslt-check.py link")
    assert "link /opt/hipblaslt/lib --into /opt/rocm/lib && ldconfig" in link
    assert "\n# is a \".lw\" wheel, built against the system ROCm" in render_dockerfile(plan)


@pytest.mark.parametrize("name", ["rocm-6.4.4", "rocm-7.0.2"])
def test_the_final_stage_proves_one_library_after_the_manifest(name: str):
    final = stages(name)["final"]
    runs = final.instructions
    check = next(i for i, text in enumerate(runs) if "hipblaslt-check.py final" in text)
    link = next(i for i, text in enumerate(runs) if "hipblaslt-check.py link" in text)
    copy_manifest = next(i for i, text in enumerate(runs) if text.startswith("COPY manifest"))
    copy_venv = next(i for i, text in enumerate(runs) if "cp -a /mnt/opt/venv /opt/venv" in text)
    assert copy_venv < link < copy_manifest < check
    command = run_instruction(final, "hipblaslt-check.py final")
    assert re.fullmatch(r"/opt/venv/bin/python /tmp/imagebuild/hipblaslt-check\.py final "
                        r"/opt/hipblaslt/lib --bench /opt/hipblaslt/bin/hipblaslt-bench "
                        r"--manifest /opt/imagebuild/manifest\.json "
                        r"--image-library-path /opt/hipblaslt/lib:/opt/aws-ofi-\w+/lib "
                        r"--targets gfx90a,gfx942", command)
    assert "type=bind,source=hipblaslt-check.py" in runs[check]


@pytest.mark.parametrize("name", ["rocm-6.4.4", "rocm-7.0.2", "rocm-7.1.1"])
def test_the_compile_step_runs_no_apt_and_caps_tensile_jobs(name: str):
    hipblaslt = stages(name)["hipblaslt"]
    build = run_instruction(hipblaslt, "./install.sh")
    assert "apt" not in " ".join(hipblaslt.instructions)
    assert re.search(r"\./install\.sh -c -j \"\$jobs\" -a 'gfx90a;gfx942' ", build)
    assert " -d" not in build.split("./install.sh", 1)[1].split("&&", 1)[0]


def test_the_pre_monorepo_source_is_a_plain_shallow_fetch():
    fetch = run_instruction(stages("rocm-6.4.4")["hipblaslt"], "git init -q /usr/src/hipblaslt")
    assert "sparse-checkout" not in fetch and "--filter" not in fetch
    assert "fetch -q --depth 1 origin rocm-6.4.4" in fetch


def test_the_build_context_and_manifest_carry_the_decision(tmp_path: Path):
    recipe = load_recipe("rocm-6.4.4", REPO)
    plan = plan_for(recipe, write_lock(recipe, tmp_path / "pylock.rocm-6.4.4.toml"))
    data = manifest(plan)["hipblaslt"]
    assert data["torch"] == {"version": "2.8.0+rocm6.4.4.gitc1404424", "links": "bundled",
                             "replaced_in": "torch/lib"}
    assert data["loaded"] is None  # filled in by the final stage's check
    assert data["ref"] == "rocm-6.4.4" and re.fullmatch(r"[0-9a-f]{40}", data["commit"])
    staged = build_context(plan, tmp_path / "ctx")
    # the check staged as a directory Python runs, with the helpers the scripts share
    assert {"hipblaslt-check.py/__main__.py", "hipblaslt-check.py/buildtime.py",
            "hipblaslt-tuning-kit.sh"} <= set(staged.files)


@pytest.mark.parametrize("name", ["rocm-6.4.4", "rocm-7.0.2"])
def test_the_stage_keeps_the_tuning_kit_in_what_the_final_stage_copies(name: str):
    """After `cmake --install` and before the dating step, the kit script lays out
    find_exact.py's tree under the prefix, which the final stage copies whole."""
    steps = stages(name)["hipblaslt"].instructions
    install = next(i for i, step in enumerate(steps) if "cmake --install build/release" in step)
    kit = next(i for i, step in enumerate(steps) if "hipblaslt-tuning-kit.sh" in step)
    epoch = steps.index("ARG SOURCE_DATE_EPOCH")
    assert install < kit < epoch
    assert run_instruction(stages(name)["hipblaslt"], "hipblaslt-tuning-kit.sh") == \
        "sh /tmp/imagebuild/hipblaslt-tuning-kit.sh " + \
        ("/usr/src/hipblaslt" if name == "rocm-6.4.4" else
         "/usr/src/hipblaslt/projects/hipblaslt") + " /opt/hipblaslt"
    assert "COPY --from=hipblaslt /opt/hipblaslt /opt/hipblaslt" in stages(name)["final"].instructions


def test_the_manifest_names_find_exacts_layout_as_the_image_reads_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The manifest's tuning kit names find_exact.py, the build directory and, under it, the
    bench and match table find_exact.py uses; the in-image reader
    (inimage.tuning.find_exact.find_exact_layout) finds the same paths in it."""
    import json

    from imagebuild.inimage.tuning.find_exact import find_exact_layout

    recipe = load_recipe("rocm-7.0.2", REPO)
    kit = manifest(plan_for(recipe, write_lock(recipe, tmp_path / "pylock.toml")))[
        "hipblaslt"]["tuning_kit"]
    build = "/opt/hipblaslt/tuning/build/release"
    assert kit == {"root": "/opt/hipblaslt/tuning",
                   "find_exact": "/opt/hipblaslt/tuning/utilities/find_exact.py",
                   "build_dir": build,
                   "bench": f"{build}/clients/staging/hipblaslt-bench",
                   "match_table": f"{build}/library/MatchTable.yaml",
                   "usage": "python /opt/hipblaslt/tuning/utilities/find_exact.py "
                            f"CONFIG.yaml {build} OUT"}
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"hipblaslt": {"tuning_kit": kit}}))
    for variable in ("IMAGEBUILD_FIND_EXACT", "IMAGEBUILD_HIPBLASLT_BUILD_DIR"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("IMAGEBUILD_MANIFEST", str(path))
    layout = find_exact_layout()
    assert layout.origin == "the image manifest's tuning kit"
    assert (str(layout.script), str(layout.build_dir)) == (kit["find_exact"], kit["build_dir"])
    assert (str(layout.bench), str(layout.match_table)) == (kit["bench"], kit["match_table"])


def test_without_the_kit_the_manifest_names_none(tmp_path: Path):
    recipe = load_recipe("rocm-7.0.2", REPO)
    hip = recipe.components["hipblaslt"]
    off = recipe.with_component("hipblaslt", replace(hip, tuning_kit=False))  # type: ignore[arg-type]
    data = manifest(plan_for(off, write_lock(off, tmp_path / "pylock.toml")))["hipblaslt"]
    assert data["tuning_kit"] is None
    assert "hipblaslt-tuning-kit.sh" not in render_dockerfile(plan_for(off, None))


def test_an_unpinned_torch_cannot_decide(tmp_path: Path):
    recipe = load_recipe("rocm-7.0.2", REPO)
    pinned = tuple(p for p in recipe.wheels.pinned if p[0] != "torch")
    unpinned = replace(recipe, wheels=replace(recipe.wheels, pinned=pinned))
    assert isinstance(unpinned.wheels, Wheels)
    with pytest.raises(RenderError, match="torch is not pinned"):
        plan_for(unpinned, None)


# --- the monorepo's sparse checkout, for real --------------------------------------------

def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def fake_rocm_libraries(root: Path) -> Path:
    """rocm-libraries in miniature: hipBLASLt's CMake files name shared/ siblings."""
    files = {
        "projects/hipblaslt/CMakeLists.txt":
            'add_subdirectory("${CMAKE_CURRENT_SOURCE_DIR}/../../shared/rocroller" x)\n'
            'add_subdirectory("${CMAKE_CURRENT_SOURCE_DIR}/../../shared/origami" origami)\n',
        "projects/hipblaslt/tensilelite/rocisa/CMakeLists.txt":
            'add_subdirectory(../../../../shared/stinkytofu stinkytofu)\n',
        "projects/hipblaslt/cmake/nn.cmake":
            'set(_root "${CMAKE_SOURCE_DIR}/../../shared/origami/data/nn")\n',
        "projects/hipblaslt/utilities/find_exact.py": "# find_exact\n",
        "projects/rocblas/CMakeLists.txt": "# not hipBLASLt\n",
        "shared/origami/CMakeLists.txt": "# origami\n",
        "shared/rocroller/CMakeLists.txt": "# rocroller\n",
        "shared/stinkytofu/CMakeLists.txt": "# stinkytofu\n",
        "shared/tensile/huge.yaml": "# rocBLAS's Tensile: not hipBLASLt's\n",
    }
    upstream = root / "rocm-libraries"
    for name, text in files.items():
        (upstream / name).parent.mkdir(parents=True, exist_ok=True)
        (upstream / name).write_text(text)
    git("init", "-q", cwd=upstream)
    git("add", "-A", cwd=upstream)
    git("-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "x",
        cwd=upstream)
    git("tag", "rocm-7.0.2", cwd=upstream)
    git("config", "uploadpack.allowFilter", "true", cwd=upstream)
    return upstream


def test_the_monorepo_fetch_checks_out_hipblaslt_and_what_its_cmake_names(tmp_path: Path):
    upstream = fake_rocm_libraries(tmp_path)
    fetch = run_instruction(stages("rocm-7.0.2")["hipblaslt"], "git init -q /usr/src/hipblaslt")
    assert "sparse-checkout set --cone projects/hipblaslt" in fetch
    assert "--depth 1 --filter=blob:none origin rocm-7.0.2" in fetch
    checkout = tmp_path / "usr-src-hipblaslt"
    command = (fetch.replace("https://github.com/ROCm/rocm-libraries.git", f"file://{upstream}")
               .replace("/usr/src/hipblaslt", str(checkout))
               .replace("/tmp/hipblaslt-shared", str(tmp_path / "shared.txt")))
    result = subprocess.run(["sh", "-c", command], check=False, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["hipblaslt:", "sparse", "checkout", "of",
                                     "projects/hipblaslt", "and:", "shared/origami",
                                     "shared/rocroller", "shared/stinkytofu"]
    present = sorted(str(p.relative_to(checkout)) for p in checkout.rglob("*")
                     if p.is_file() and ".git" not in p.parts)
    assert present == [
        "projects/hipblaslt/CMakeLists.txt",
        "projects/hipblaslt/cmake/nn.cmake",
        "projects/hipblaslt/tensilelite/rocisa/CMakeLists.txt",
        "projects/hipblaslt/utilities/find_exact.py",
        "shared/origami/CMakeLists.txt",
        "shared/rocroller/CMakeLists.txt",
        "shared/stinkytofu/CMakeLists.txt",
    ]
    # A partial clone: the blobs of what was not checked out were never fetched.
    missing = git("rev-list", "--objects", "--missing=print", "HEAD", cwd=checkout)
    assert len([line for line in missing.splitlines() if line.startswith("?")]) == 2


# --- Tensile's job cap ---------------------------------------------------------------------

def jobs_command() -> str:
    build = run_instruction(stages("rocm-7.0.2")["hipblaslt"], "./install.sh")
    match = re.search(r"jobs=\$\((awk .*? /proc/meminfo)\)", build)
    assert match, build
    return match.group(1)


def run_jobs(command: str) -> int:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OMP_")}
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True,
                            env=environment, check=True)
    return int(result.stdout)


def test_tensile_jobs_on_this_machine():
    cpus = int(subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout)
    with open("/proc/meminfo", encoding="utf-8") as handle:
        kib = next(int(line.split()[1]) for line in handle if line.startswith("MemTotal:"))
    limit = Path("/sys/fs/cgroup/memory.max")
    if limit.is_file() and limit.read_text().strip().isdigit():
        kib = min(kib, int(limit.read_text()) // 1024)
    assert run_jobs(jobs_command()) == max(1, min(cpus, kib // (4 * 1024 * 1024)))


@pytest.mark.parametrize(("cpus", "mem_gib", "cgroup", "expected"), [
    (16, 32, "max", 8),        # memory-bound: 32 GiB / 4 GiB
    (4, 256, "max", 4),        # CPU-bound
    (64, 256, str(16 << 30), 4),  # the cgroup's limit is lower than MemTotal
    (8, 2, "max", 1),          # never below one job
    (8, 64, "", 8),            # no cgroup v2 file
])
def test_tensile_jobs_formula(tmp_path: Path, cpus: int, mem_gib: int, cgroup: str,
                              expected: int):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal:       {mem_gib * 1024 * 1024} kB\nMemFree: 1 kB\n")
    limit = tmp_path / "memory.max"
    if cgroup:
        limit.write_text(cgroup + "\n")
    command = (jobs_command().replace("$(nproc)", str(cpus))
               .replace("/sys/fs/cgroup/memory.max", str(limit))
               .replace("/proc/meminfo", str(meminfo)))
    assert run_jobs(command) == expected


def with_options(tmp_path: Path, base: str, options: str) -> str:
    """A recipe that extends a shipped one with hipBLASLt build options, rendered."""
    recipes = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", recipes)
    (recipes / "options.yaml").write_text(
        f"version: 1\nextends: {base}\nhipblaslt:\n" + "".join(
            f"  {line}\n" for line in options.splitlines()))
    return render_dockerfile(committed_plan(load_recipe("options", tmp_path)))


def install_line(text: str) -> str:
    stage = text.split("FROM toolchain AS hipblaslt", 1)[1].split("\nFROM ", 1)[0]
    return re.search(r"taskset -c \"\$cpus\" \./install\.sh[^\n]*", stage).group(0)


@pytest.mark.parametrize("name", ["rocm-6.4.4", "rocm-7.0.2", "rocm-7.1.1", "rocm-7.2.4"])
def test_the_shipped_recipes_build_every_logic_file_with_rocroller(name: str):
    line = install_line(render_dockerfile(committed_plan(load_recipe(name, REPO))))
    assert "--logic-yaml-filter" not in line and "--skip_rocroller" not in line


def test_logic_filter_and_rocroller_reach_install_sh_quoted(tmp_path: Path):
    text = with_options(tmp_path, "rocm-7.2.4", "logic_filter: gfx942/*/*\nrocroller: false")
    assert install_line(text).endswith(
        "./install.sh -c -j \"$jobs\" -a 'gfx90a;gfx942' --logic-yaml-filter 'gfx942/*/*' "
        "--skip_rocroller \\")
    assert "# --logic-yaml-filter gfx942/*/*: only the logic files matching it get kernels" in text
    assert "# --skip_rocroller: no rocRoller backend" in text


def test_logic_filter_alone_on_644(tmp_path: Path):
    """6.4's install.sh takes the filter; rocRoller is not part of it (no --skip_rocroller)."""
    text = with_options(tmp_path, "rocm-6.4.4", "logic_filter: gfx942/Equality/*")
    line = install_line(text)
    assert line.endswith("--logic-yaml-filter 'gfx942/Equality/*' \\")
    assert "--skip_rocroller" not in line


def test_the_jobs_cap_reaches_cmake_and_make_without_their_own_j():
    stage = render_dockerfile(committed_plan(load_recipe("rocm-7.2.4", REPO))).split(
        "FROM toolchain AS hipblaslt", 1)[1]
    assert '&& export CMAKE_BUILD_PARALLEL_LEVEL="$jobs" MAKEFLAGS="-j$jobs" \\' in stage
