"""The hipblaslt stage's compile step, run for real where this machine can: the cblas
package configuration the pre-1.1 clients need (with CMake and stand-in BLAS/LAPACK
libraries built by gcc), and the CPU cap that reaches install.sh's final `make -j$(nproc)`
(with a stand-in install.sh). The real compile needs the ROCm base image.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from imagebuild.components.hipblaslt.component import CBLAS_CONFIG as HIPBLASLT_CBLAS_CONFIG
from imagebuild.components.hipblaslt.component import FOLDER
from imagebuild.recipe.load import load_recipe
from imagebuild.render.context import build_context
from imagebuild.render.dockerfile import render_dockerfile
from imagebuild.render.plan import plan_for
from tests.components.conftest import REPO
from tests.support.render import committed_plan, write_lock

CBLAS_SOURCE = FOLDER / "cblas-config.cmake"
needs_cmake = pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("gcc") is None,
                                 reason="needs cmake and gcc")


def build_command(name: str) -> str:
    text = render_dockerfile(committed_plan(load_recipe(name, REPO)))
    stage = text.split("FROM toolchain AS hipblaslt", 1)[1].split("\nFROM ", 1)[0]
    return next(run for run in stage.split("\nRUN ") if "./install.sh" in run)


# What clients/CMakeLists.txt (ROCm/hipBLASLt before 1.1) asks of cblas, in miniature:
# find_package(cblas REQUIRED CONFIG), then hipblaslt-bench linking the names lapack cblas.
CLIENTS = """cmake_minimum_required(VERSION 3.16)
project(clients LANGUAGES C)
find_package(cblas REQUIRED CONFIG)
add_subdirectory(benchmarks)
"""
BENCHMARKS = """add_executable(bench main.c)
target_link_libraries(bench PRIVATE lapack cblas)
"""
MAIN = """#include <cblas.h>
int dgetrf_(void);
int main(void) { return cblas_sgemm_stub() + dgetrf_() - 3; }
"""


def distro(root: Path) -> Path:
    """Stand-ins for Ubuntu's libblas-dev (CBLAS in libblas.so, cblas.h in the multiarch
    include directory) and liblapack-dev, under ROOT/usr."""
    lib = root / "usr" / "lib" / "x86_64-linux-gnu"
    include = root / "usr" / "include" / "x86_64-linux-gnu"
    lib.mkdir(parents=True)
    include.mkdir(parents=True)
    (include / "cblas.h").write_text("int cblas_sgemm_stub(void);\n")
    (root / "blas.c").write_text("int cblas_sgemm_stub(void) { return 1; }\n")
    (root / "lapack.c").write_text("int cblas_sgemm_stub(void);\n"
                                   "int dgetrf_(void) { return 1 + cblas_sgemm_stub(); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib / "libblas.so"),
                    str(root / "blas.c")], check=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib / "liblapack.so"),
                    str(root / "lapack.c"), f"-L{lib}", "-lblas"], check=True)
    return lib


def configure(root: Path, lib: Path, local: Path) -> subprocess.CompletedProcess:
    source = root / "clients"
    (source / "benchmarks").mkdir(parents=True, exist_ok=True)
    (source / "CMakeLists.txt").write_text(CLIENTS)
    (source / "benchmarks" / "CMakeLists.txt").write_text(BENCHMARKS)
    (source / "benchmarks" / "main.c").write_text(MAIN)
    build = root / "build"
    shutil.rmtree(build, ignore_errors=True)
    return subprocess.run(
        ["cmake", "-S", str(source), "-B", str(build), "-G", "Unix Makefiles",
         f"-DCMAKE_PREFIX_PATH={local}", f"-DCMAKE_LIBRARY_PATH={lib}",
         f"-DCMAKE_INCLUDE_PATH={root / 'usr' / 'include'}",
         "-DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF"],
        capture_output=True, text=True, timeout=300, check=False)


@needs_cmake
def test_the_pre_11_clients_find_cblas_from_the_distros_libraries(tmp_path: Path):
    lib = distro(tmp_path)
    local = tmp_path / "usr" / "local"
    # Without the configuration install.sh -d would have built: configure stops.
    result = configure(tmp_path, lib, local)
    assert result.returncode != 0
    assert "cblas" in result.stderr

    # The stage installs the staged file where -d's LAPACK build puts its own.
    command = build_command("rocm-6.4.4")
    match = re.search(r"install -D -m 644 /tmp/imagebuild/(\S+) (/usr/local/\S+)", command)
    assert match and match.group(1) == HIPBLASLT_CBLAS_CONFIG
    target = tmp_path / match.group(2).lstrip("/")
    target.parent.mkdir(parents=True)
    shutil.copy(CBLAS_SOURCE, target)
    result = configure(tmp_path, lib, local)
    assert result.returncode == 0, result.stdout + result.stderr
    subprocess.run(["cmake", "--build", str(tmp_path / "build")], check=True,
                   capture_output=True, timeout=300)
    run = subprocess.run([str(tmp_path / "build" / "benchmarks" / "bench")], check=False,
                         env=dict(os.environ, LD_LIBRARY_PATH=str(lib)))
    assert run.returncode == 0


@needs_cmake
def test_the_cblas_configuration_names_what_is_missing(tmp_path: Path):
    (tmp_path / "usr" / "lib").mkdir(parents=True)
    target = tmp_path / "usr" / "local" / "lib" / "cmake" / "cblas" / "cblas-config.cmake"
    target.parent.mkdir(parents=True)
    shutil.copy(CBLAS_SOURCE, target)
    result = configure(tmp_path, tmp_path / "usr" / "lib", tmp_path / "usr" / "local")
    assert result.returncode != 0
    assert "libblas-dev and liblapack-dev" in result.stderr.replace("\n", " ")


def test_the_cblas_configuration_is_staged_with_the_clients(tmp_path: Path):
    recipe = load_recipe("rocm-7.0.2", REPO)
    build_context(plan_for(recipe, write_lock(recipe, tmp_path / "pylock.toml")),
                  tmp_path / "ctx")
    assert (tmp_path / "ctx" / HIPBLASLT_CBLAS_CONFIG).read_text() == \
        CBLAS_SOURCE.read_text()
    assert f"source={HIPBLASLT_CBLAS_CONFIG}," in build_command("rocm-7.0.2")
    recipes = [p.stem for p in (REPO / "recipes").glob("rocm-*.yaml")]
    for name in recipes:
        packages = load_recipe(name, REPO).build_packages
        assert {"libblas-dev", "liblapack-dev"} <= set(packages), name


def test_install_sh_and_its_final_make_are_capped_at_the_jobs(tmp_path: Path):
    """The stage's own commands, with a stand-in install.sh that reports what its
    `make -j$(nproc)` and Tensile's default (len(os.sched_getaffinity(0))) would use."""
    command = build_command("rocm-7.0.2")
    cpus = re.search(r"cpus=\$\(python3 -c '[^']*' \"\$jobs\"\)", command)
    assert cpus, "no CPU set computed from the jobs"
    assert re.search(r'taskset -c "\$cpus" \./install\.sh -c -j "\$jobs" ', command)
    fake = tmp_path / "install.sh"
    fake.write_text("#!/bin/sh\necho \"make -j$(nproc)\"\n"
                    "python3 -c 'import os; print(\"tensile\", len(os.sched_getaffinity(0)))'\n")
    fake.chmod(0o755)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OMP_")}
    available = len(os.sched_getaffinity(0))
    for jobs in sorted({1, available}):
        script = f'jobs={jobs} && {cpus.group(0)} && taskset -c "$cpus" {fake} -j "$jobs"'
        result = subprocess.run(["sh", "-c", script], capture_output=True, text=True,
                                env=environment, check=True)
        assert result.stdout.split() == ["make", f"-j{jobs}", "tensile", str(jobs)]


def test_install_sh_gets_the_build_options_verbatim_and_the_cap_in_its_environment(
        tmp_path: Path):
    """The rendered export and install.sh call, run by sh with a stand-in install.sh that
    prints its arguments and the parallel levels it inherits. The filter is a glob that
    matches files in the working directory: unquoted, the shell would expand it."""
    recipes = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", recipes)
    (recipes / "options.yaml").write_text(
        "version: 1\nextends: rocm-7.2.4\nhipblaslt:\n  logic_filter: gfx942/*/*\n"
        "  rocroller: false\n")
    text = render_dockerfile(committed_plan(load_recipe("options", tmp_path)))
    stage = text.split("FROM toolchain AS hipblaslt", 1)[1].split("\nFROM ", 1)[0]
    export = re.search(r"export CMAKE_BUILD_PARALLEL_LEVEL=[^\\]*", stage).group(0)
    call = re.search(r"taskset -c \"\$cpus\" \./install\.sh[^\\]*", stage).group(0)
    work = tmp_path / "work"
    (work / "gfx942" / "Equality").mkdir(parents=True)
    (work / "gfx942" / "Equality" / "a.yaml").write_text("")
    (work / "install.sh").write_text(
        "#!/bin/sh\nprintf '%s\\n' \"$@\"\n"
        "echo \"cmake=$CMAKE_BUILD_PARALLEL_LEVEL make=$MAKEFLAGS nproc=$(nproc)\"\n")
    (work / "install.sh").chmod(0o755)
    cpu = min(os.sched_getaffinity(0))
    result = subprocess.run(["sh", "-c", f"jobs=1 && cpus={cpu} && {export} && {call}"],
                            cwd=work, capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == [
        "-c", "-j", "1", "-a", "gfx90a;gfx942", "--logic-yaml-filter", "gfx942/*/*",
        "--skip_rocroller", "cmake=1 make=-j1 nproc=1"]
