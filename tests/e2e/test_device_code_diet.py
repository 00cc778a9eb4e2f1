"""Device code for the recipe's GPUs only, on a packaged-ROCm image, on a real Docker engine.

The base is a stand-in for AMD's rocm/dev images, made here and pushed to the loopback
registry: Debian with an /opt/rocm whose librocblas, libhipblaslt and libMIOpen are gcc-built
ELF libraries, with kernel files for four architectures named like the real ones beside them
(rocblas/library/TensileLibrary_lazy_<gfx>.dat and Kernels.so-000-<gfx>.hsaco,
hipblaslt/library/extop_<gfx>.co, share/miopen/db/<gfx><CUs>.kdb). The torch wheel's
libtorch_hip links the three, as the ".lw" wheels link the base image's ROCm. A 7.2.4 recipe
for gfx942 is locked and built: the image keeps gfx942's kernel files only, the size table
says what went, and a target the base image has no kernels for fails the build. The same
runs on a stand-in of a ROCm Core SDK 10.1 base (ROCm in /opt/rocm/core-10.1, with the
/opt/rocm/lib link package installs add): the recipe's default rocm_prefix is that directory
and the diet and its check work there.

What only a cluster shows: the real files' names in AMD's images, and kernels at work."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.images import latest_tag
from testbed.wheel_index import make_wheel
from tests.support.engine_env import REGISTRY, imagebuild_env
from tests.support.indexserver import IndexServer

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

NAME = "device-diet-e2e"
#: ROCm release of the stand-in -> (where it installs ROCm, the torch version it pins)
LINES = {"7.2.4": ("/opt/rocm", "2.9.1+rocm7.2.4.lw.git0d1e7c0d"),
         "10.1.0": ("/opt/rocm/core-10.1", "2.14.0+rocm10.1.0")}
ARCHES = ("gfx90a", "gfx942", "gfx950", "gfx1100")
KERNEL_SIZE = 256 * 1024
KERNELS = {
    "lib/rocblas/library": [f"TensileLibrary_lazy_{a}.dat" for a in ARCHES]
    + [f"Kernels.so-000-{a}.hsaco" for a in ARCHES] + ["TensileManifest.txt"],
    "lib/hipblaslt/library": [f"extop_{a}.co" for a in ARCHES],
    "share/miopen/db": ["gfx90a6e.kdb", "gfx942130.kdb"],
}
LIBRARIES = ("librocblas.so.4", "libhipblaslt.so.0", "libMIOpen.so.1")
RECIPE = """\
version: 1
description: packaged ROCm stand-in, device code for gfx942 only
rocm: {rocm}
base_image: {base}
python: "3.11"
wheels:
  index_url: {index}
  packages:
    torch: {torch}
gpu_targets: [{targets}]
dockerfile:
  syntax: null
"""


def gcc(out: Path, *args: str) -> None:
    source = out.parent / f"{out.name.split('.')[0]}.c"
    source.write_text(f"int {out.name.split('.')[0]}_version(void) {{ return 1; }}\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(source), *args], check=True)
    source.unlink()


def standin_base(work: Path, prefix: str) -> str:
    """ROCm's libraries and kernel files under ``prefix`` (for the Core SDK, with the
    /opt/rocm/lib link its packages add) on the registry's Debian base."""
    rocm = work / "context" / prefix.lstrip("/")
    (rocm / "lib").mkdir(parents=True)
    if prefix != "/opt/rocm":
        (work / "context" / "opt" / "rocm" / "lib").symlink_to(
            f"{Path(prefix).name}/lib")
    for soname in LIBRARIES:
        gcc(rocm / "lib" / soname, f"-Wl,-soname,{soname}")
    for directory, names in KERNELS.items():
        (rocm / directory).mkdir(parents=True, exist_ok=True)
        for name in names:
            (rocm / directory / name).write_bytes(name.encode().ljust(KERNEL_SIZE, b"\0"))
    return str(rocm / "lib")


@pytest.fixture(scope="module", params=sorted(LINES), ids=lambda rocm: f"rocm-{rocm}")
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
          registry_base_image: str, docker_engine) -> Iterator[dict]:
    rocm = request.param
    prefix, torch = LINES[rocm]
    name = NAME if rocm == "7.2.4" else f"{NAME}-{rocm.split('.')[0]}"
    base = f"{REGISTRY}/imagebuild-test/rocm-standin:{rocm}"
    work = tmp_path_factory.mktemp("standin")
    libdir = standin_base(work, prefix)
    (work / "context" / "Dockerfile").write_text(f"FROM {registry_base_image}\nCOPY opt /opt\n"
                                                 "RUN ldconfig\n")
    for command in (["build", "--network", "host", "-t", base, str(work / "context")],
                    ["push", base]):
        subprocess.run(["/usr/bin/docker", *command], check=True, capture_output=True)
    # torch's HIP library links the base image's ROCm, as a ".lw" wheel does.
    gcc(work / "libtorch_hip.so", "-Wl,--no-as-needed", f"-L{libdir}",
        *(f"-l:{lib}" for lib in LIBRARIES), f"-Wl,--enable-new-dtags,-rpath,{prefix}/lib")
    index = work / "index"
    make_wheel(index, "torch", torch, "cp311", files={
        "torch/__init__.py": f'__version__ = "{torch}"\n'.encode(),
        "torch/lib/libtorch_hip.so": (work / "libtorch_hip.so").read_bytes()})
    project = tmp_path_factory.mktemp("project")
    (project / "recipes").mkdir()
    with IndexServer(index) as server, \
            imagebuild_env(project, tmp_path_factory.mktemp("cache")):
        def recipe(recipe_name: str, targets: str) -> None:
            (project / "recipes" / f"{recipe_name}.yaml").write_text(RECIPE.format(
                rocm=rocm, base=base, index=server.url, torch=torch, targets=targets))
            assert main(["lock", recipe_name]) == 0

        recipe(name, "gfx942")
        assert main(["build", name]) == 0
        recipe(f"{name}-gfx1030", "gfx942, gfx1030")
        failed = main(["build", f"{name}-gfx1030"])
        yield {"project": project, "failed": failed, "name": name, "prefix": prefix,
               "image": latest_tag(name)}


def run(built: dict, *command: str) -> str:
    result = subprocess.run(["/usr/bin/docker", "run", "--rm", "--network", "none",
                             built["image"], *command], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_only_the_targets_kernel_files_are_left(built: dict) -> None:
    rocm = built["prefix"]
    left = set(run(built, "find", f"{rocm}/lib", f"{rocm}/share", "-type", "f").split())
    kept = {f"{rocm}/lib/rocblas/library/{n}" for n in (
        "TensileLibrary_lazy_gfx942.dat", "Kernels.so-000-gfx942.hsaco", "TensileManifest.txt")}
    kept |= {f"{rocm}/lib/hipblaslt/library/extop_gfx942.co",
             f"{rocm}/share/miopen/db/gfx942130.kdb"}
    kept |= {f"{rocm}/lib/{name}" for name in LIBRARIES}
    assert left == kept
    if rocm != "/opt/rocm":  # the Core SDK's ROCm is named for the image's programs
        assert f"ROCM_PATH={rocm}" in run(built, "env").split()


def test_the_report_and_the_size_table_say_what_went(built: dict) -> None:
    report = json.loads(run(built, "cat", "/opt/imagebuild/device-code.json"))
    assert report["removed_files"] == 10  # 3 architectures x 3 files, and gfx90a's database
    assert report["removed_bytes"] == 10 * KERNEL_SIZE
    libraries = {Path(entry["library"]).name: entry["files"] for entry in report["checked"]}
    assert libraries == {"librocblas.so.4": {"gfx942": 2}, "libhipblaslt.so.0": {"gfx942": 1},
                         "libMIOpen.so.1": {"gfx942": 1}}
    record = json.loads((built["project"] / "artifacts" / f"{built['name']}.build.json")
                        .read_text())
    assert record["sizes"]["device_code_removed"] == {"bytes": 10 * KERNEL_SIZE, "files": 10}


def test_a_target_the_base_image_has_no_kernels_for_fails_the_build(built: dict) -> None:
    assert built["failed"] != 0
    log = (built["project"] / "artifacts" / f"{built['name']}-gfx1030" / "build.log").read_text()
    rocm = built["prefix"]
    assert (f"{rocm}/lib/librocblas.so.4 loads its kernels from {rocm}/lib/rocblas/library,"
            " which holds none for gfx1030 (nor did the base image)") in log
