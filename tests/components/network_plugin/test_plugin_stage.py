"""The network-plugin stage of the shipped ROCm recipes, built for real and loaded.

Each shipped plugin kind (aws-ofi-nccl v1.21.1 of rocm-7.2.4 and its siblings, aws-ofi-rccl
cxi of rocm-6.4.4) is built by ``imagebuild lock`` + ``imagebuild build`` from a recipe that
keeps the shipped recipe's plugin (kind, repository, ref, libfabric release) and sites, on a
debootstrapped Debian in the loopback registry whose packaged ROCm stands in for AMD's
(testbed/plugin_recipe.py): sid with experimental's ROCm 7.2.4 (RCCL 7.2.4 = RCCL 2.27.7,
HIP 7.2.4), and for one case trixie's HIP 5.7.1 and RCCL 5.4.3. The same renderer and the
same plugin template. Sources come from ../shared/fixtures/sources through
``--git-mirror``, as at an air-gapped site (testbed/source_mirror.py). Proven inside the
built images:

- the plugin is where the image points RCCL (NCCL_NET_PLUGIN, which the EDF inherits) and
  dlopen(RTLD_NOW) succeeds with the image's libfabric; with a site's libfabric bound and put
  first on the loader path (as the LUMI profile does) that one is used instead;
- the libfabric symbol versions it needs, read from its ELF by the build and recorded in
  the manifest, are provided by the oldest libfabric the recipe's sites bind (1.22): dlopen
  against a libfabric built from the 1.22.0 fixture succeeds;
- a plugin built against libfabric 2.1 needs FABRIC_1.8: the loader refuses it against
  1.22 (the failure RCCL hides), the build's check fails naming the version, and rendering
  a recipe that would build it for a 1.22 site is refused;
- no RPATH/RUNPATH: nothing in the plugin shadows a site-bound libfabric.
- the plugin exports an interface version (ncclNetPlugin_v<N>) that the image's RCCL looks
  up; both sets, read by the build from the two libraries, and the chosen one are recorded.
  Measured: RCCL 7.2.4 looks up v10..v6, RCCL 5.4.3 v6, v5, v4; aws-ofi-nccl v1.21.1 exports
  v12..v6 (v1.18.0: v11..v2; v10 chosen on 7.2.4), aws-ofi-rccl cxi only v5. So aws-ofi-rccl does not work
  with RCCL 7.2.4: its build stops at the check, naming both sets (RCCL would otherwise
  fall back to its own transport without a word). It builds and loads against RCCL 5.4.3
  (v5 chosen), the one case kept on trixie: the only RCCL here that takes a v5 plugin.

The image of the aws-ofi-nccl case also carries the shipped recipes' rccl-tests (develop,
from the fixture bundle at ae3e635), built by the same rccl-tests stage with experimental's
hipcc 7.2.4 for one target, gfx942 (to keep CI short): every *_perf binary resolves
librccl.so.1 to librccl1 7.2.4's file, carries device code for gfx942 only (read from its
offload bundles), and all_reduce_perf runs by name (--help; without a GPU it stops with "no
ROCm-capable device is detected"). Its compile step takes 41 s beside the libfabric build;
with hipcc in the 7.2.4 toolchain the whole file took 355 s with an empty BuildKit cache
(all four builds rebuilt; 264 s before rccl-tests, measured the same way in an earlier
session, so the difference also holds that session's machine load).

The same image carries RCCL's example tuner plugin, built by the rccl-tuner stage from the
fixture archive's files (rccl-ext-tuner.tar.gz, served by the mirror as ROCm/rccl.git at the
shipped recipe's tag, locked to its commit, the example's directory checked out alone) with
the v4 adapter: the build
read ncclTunerPlugin_v4, v3, v2 from librccl1 7.2.4 and chose v4 (the tuner exports v5 and
v4); NCCL_TUNER_PLUGIN names it, and NCCL_TUNER_CONFIG_FILE the configuration that
`imagebuild tune rccl` wrote from a sweep before the build (rccl_tuner.config, copied into
the image); rccl-tuner-probe, run in the image, chooses differently with it than without it
for the sizes and the topology it names (allreduce up to 1 MiB on 1 node x 8 ranks) and for
no other. The example
as it is (interface_adapter: false, in a recipe without a network plugin) fails the build at
the tuner check, naming both sets. The tuner stage adds 3-6 s of steps beside the libfabric
build (fetch 0.2-0.5 s, compile 0.4-2.2 s, probe 0.4-1.5 s, the check 1.3 s; it took 55 s
beside the libfabric and rccl-tests compiles before its scan of librccl found the lookup
names by their literal) and 60 KB to the image; the refused recipe's build takes 2-13 s (its
toolchain stage is the shared layer). The whole file took 405 s with the sid toolchain
layer rebuilt, 375 s with it cached, 186 s with every source build cached.

Cost, measured on a 2-core machine with an empty BuildKit cache and the debootstrapped
bases present (debootstrap of sid: 33 s, once): the file takes 264 s (trixie's three builds
before: 199 s). The toolchain stage takes 35 s on sid (apt fetches about 0.5 GB: librccl1
alone is 369 MB) and 18 s on trixie; the two libfabric builds about 30-55 s each; the
trixie case about 90 s of it all. The 7.2.4 images are 878 MB (449 MiB of them the ROCm
packages the final stage installs; 893 MB with rccl-tests), the 5.4.3 one 746 MB.

Not exercised here (only on a cluster): AMD's base images and their /opt/rocm (the
/opt/rocm prefix, rocm-dev and rccl-dev; RCCL 6.4.4's lookup, so whether the rocm-6.4.4
recipe's aws-ofi-rccl passes its own build), the CXI provider and Slingshot itself, RCCL
actually choosing the plugin at run time, and the hipBLASLt stage.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from imagebuild.components.network_plugin import component as network_plugin
from imagebuild.components.rccl_tests import component as rccl_tests
from imagebuild.components.rccl_tuner import component as tuner_component
from imagebuild.images import latest_tag
from imagebuild.recipe.load import load_recipe
from testbed import base_images
from testbed.cli import run_imagebuild
from testbed.plugin_recipe import (
    REPO_ROOT,
    SID_ROCM_7_2_4,
    TRIXIE_ROCM_5_7_1,
    DebianRocm,
    placeholder_torch,
    plugin_recipe,
)
from testbed.source_mirror import SourceMirror
from tests.support.indexserver import IndexServer
from tests.support.scripts import staged

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

DOCKER = "/usr/bin/docker"
#: test recipe -> (Debian ROCm, shipped recipe whose plugin it builds, libfabric override,
#: sites override)
RECIPES: dict[str, tuple[DebianRocm, str, str | None, tuple[str, ...] | None]] = {
    "plugin-nccl-724": (SID_ROCM_7_2_4, "rocm-7.2.4", None, None),
    # The plugin a recipe would get against libfabric 2.1 with no site constraint.
    "plugin-nccl-724-fabric2": (SID_ROCM_7_2_4, "rocm-7.2.4", "2.1.0", ()),
    # aws-ofi-rccl exports only ncclNetPlugin_v5: RCCL 7.2.4 refuses it, 5.4.3 takes it.
    # (Beverin only: LUMI runs ROCm up to 7.0, and this base is 7.2.4.)
    "plugin-rccl-724": (SID_ROCM_7_2_4, "rocm-6.4.4", None, ("cscs-beverin",)),
    "plugin-rccl-543": (TRIXIE_ROCM_5_7_1, "rocm-6.4.4", None, None),
    "tuner-724-as-is": (SID_ROCM_7_2_4, "rocm-7.2.4", None, None),
}
#: test recipe -> the GPU targets its rccl-tests are built for (one, to keep CI short); the
#: image of the plugin that RCCL 7.2.4 loads carries them, so no other image is built.
RCCL_TESTS = {"plugin-nccl-724": ("gfx942",)}
#: test recipe -> its rccl_tuner section (besides repository and ref: the shipped recipe's).
#: The image RCCL 7.2.4 loads carries the example tuner behind the v4 adapter; the example as
#: it is (v5 only) goes into a recipe of its own, without a network plugin, which must fail.
TUNERS: dict[str, dict[str, object]] = {
    "plugin-nccl-724": {"interface_adapter": True, "config": "tuning/nccl_tuner.conf"},
    "tuner-724-as-is": {"interface_adapter": False},
}
#: The sweep `imagebuild tune rccl` turns into the tuner configuration the image carries: on
#: 1 node x 8 ranks, ring/ll is fastest up to 64 KiB and tree/simple up to 1 MiB.
SWEEP = ("collective,bytes,algorithm,protocol,busbw_gbs,nNodes,nRanks\n"
         "allreduce,65536,ring,ll,9.5,1,8\nallreduce,65536,tree,ll128,7.0,1,8\n"
         "allreduce,1048576,tree,simple,80,1,8\nallreduce,1048576,ring,simple,60,1,8\n")
#: Recipes without the network plugin (they exist for another stage).
NO_NETWORK_PLUGIN = ("tuner-724-as-is",)
#: The builds that must fail, at the plugin or tuner stage's interface check.
REFUSED = ("plugin-rccl-724", "tuner-724-as-is")
#: test recipe -> (what its RCCL looks up, what its plugin exports, newest first)
INTERFACES = {
    # aws-ofi-nccl v1.21.1 (v1.18.0 exported v11..v2).
    "plugin-nccl-724": ([10, 9, 8, 7, 6], list(range(12, 5, -1))),
    "plugin-rccl-543": ([6, 5, 4], [5]),
}
LOADED = ["plugin-nccl-724", "plugin-rccl-543"]
CHECK_SCRIPT = staged(network_plugin.CHECK, network_plugin.FOLDER / "check.py")


def imagebuild(project: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return run_imagebuild(project, *argv, timeout=1800)


def docker(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *argv], capture_output=True, text=True, check=check,
                          timeout=300)


@pytest.fixture(scope="module")
def bases(docker_engine, local_registry: str) -> dict[str, str]:
    """The Debian bases of RECIPES, in the loopback registry: tag -> registry reference."""
    pushed = {}
    for debian, *_ in RECIPES.values():
        if debian.base.tag not in pushed:
            base_images.import_base_image_docker(docker_engine, debian.base)
            pushed[debian.base.tag] = base_images.push_base_image(docker_engine, debian.base)
    return pushed


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, bases: dict[str, str]) -> dict:
    """Locked and built: one image per test recipe (the refused ones: their build's
    output); returns their tags and the project."""
    root = tmp_path_factory.mktemp("plugin-project")
    (root / "recipes").mkdir()
    placeholder_torch(root / "index" / "whl")
    index = IndexServer(root / "index")
    refused = {}
    (root / "sweep.csv").write_text(SWEEP)
    tuned = imagebuild(root, "tune", "rccl", "--sweep-results", str(root / "sweep.csv"),
                       "--out", str(root / "tuning"))
    assert tuned.returncode == 0, tuned.stderr
    shipped_tuner = tuner_component.section(load_recipe("rocm-7.2.4", REPO_ROOT))
    assert shipped_tuner is not None
    with index, SourceMirror(root / "mirror") as mirror:
        mirrors = [f"--git-mirror={src}={dst}" for src, dst in mirror.mirrors.items()]
        for name, (debian, shipped, libfabric, sites) in RECIPES.items():
            tuner = ({"repository": shipped_tuner.source.repository,
                      "ref": shipped_tuner.source.ref, **TUNERS[name]}
                     if name in TUNERS else None)
            (root / "recipes" / f"{name}.yaml").write_text(plugin_recipe(
                shipped, debian, bases[debian.base.tag], index.url_for("whl/"), libfabric,
                sites, RCCL_TESTS.get(name, ()), tuner, name not in NO_NETWORK_PLUGIN))
            locked = imagebuild(root, "lock", name, *mirrors)
            assert locked.returncode == 0, locked.stderr[-3000:]
            started = time.monotonic()
            built = imagebuild(root, "build", name)
            print(f"\n[plugin] {name}: build {time.monotonic() - started:.0f} s")
            if name in REFUSED:
                print(f"\n[plugin] {name} (refused):\n{built.stderr[-1500:]}")
                refused[name] = built
                continue
            print(f"\n[plugin] {name}:\n{built.stdout[-1500:]}")
            assert built.returncode == 0, (built.stdout[-2000:], built.stderr[-3000:])
    return {"root": root, "refused": refused,
            "images": {name: latest_tag(name) for name in RECIPES if name not in REFUSED}}


def manifest(image: str) -> dict:
    return json.loads(docker("run", "--rm", image, "cat", "/opt/imagebuild/manifest.json").stdout)


def image_env(image: str) -> dict[str, str]:
    config = json.loads(docker("image", "inspect", image).stdout)[0]["Config"]
    return dict(item.split("=", 1) for item in config["Env"])


def dlopen(image: str, library: str, *run_args: str) -> subprocess.CompletedProcess[str]:
    """dlopen(RTLD_NOW) in a container of ``image``; prints the libfabric the loader mapped."""
    code = ("import ctypes, os, sys\n"
            "ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW)\n"
            "print([p for p in open('/proc/self/maps').read().split() if 'libfabric.so' in p][0])")
    return docker("run", "--rm", *run_args, image, "python3", "-c", code, library, check=False)


def libfabric_dir(image: str, tmp_path: Path) -> Path:
    """/opt/libfabric/lib of ``image``, copied out (to bind into another container)."""
    container = docker("create", image).stdout.strip()
    try:
        docker("cp", f"{container}:/opt/libfabric/lib", str(tmp_path / "libfabric"))
    finally:
        docker("rm", container)
    return tmp_path / "libfabric"


@pytest.mark.parametrize("name", LOADED)
def test_plugin_loads_where_the_image_points_rccl(project: dict, name: str) -> None:
    image = project["images"][name]
    plugin = manifest(image)["network_plugin"]
    env = image_env(image)
    # The image points RCCL at the plugin by absolute path; the EDF only adds site settings.
    edf = tomllib.loads((project["root"] / "envs" / f"{name}.toml").read_text())
    pointed = edf.get("env", {}).get("NCCL_NET_PLUGIN", env["NCCL_NET_PLUGIN"])
    assert pointed == env["NCCL_NET_PLUGIN"] == plugin["library"]
    docker("run", "--rm", image, "test", "-f", pointed)
    loaded = dlopen(image, pointed)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip().startswith(plugin["libfabric"]["prefix"] + "/lib/libfabric.so")


@pytest.mark.parametrize("name", LOADED)
def test_recorded_symbol_versions_are_in_the_oldest_supported_libfabric(
        project: dict, name: str) -> None:
    plugin = manifest(project["images"][name])["network_plugin"]
    elf = plugin["elf"]
    assert plugin["loads_with"]["oldest_libfabric"] == "1.22.0"
    assert plugin["loads_with"]["max_symbol_version"] == "FABRIC_1.7"
    assert "fi_getinfo@FABRIC_1.7" in elf["libfabric_symbols"]
    assert max(elf["libfabric_versions_needed"]) == "FABRIC_1.7"
    assert "libfabric.so.1" in elf["needed"]
    # Nothing in the plugin can shadow the libfabric a site binds.
    assert elf["rpath"] == [] and elf["runpath"] == []
    assert elf["dlopen_in_image"]["libfabric"]
    # The plugin exports an interface version that the image's own RCCL looks up, read
    # from both libraries by the build; the chosen one is the newest shared.
    net = elf["net_interface"]
    assert net["rccl"].startswith("/usr/lib/") and "librccl.so" in net["rccl"]
    assert (net["rccl_looks_up"], net["plugin_exports"]) == INTERFACES[name]
    assert net["chosen"] == max(set(net["rccl_looks_up"]) & set(net["plugin_exports"]))
    print(f"\n[plugin] {name}: RCCL looks up {net['rccl_looks_up']}, plugin exports "
          f"{net['plugin_exports']}, chosen v{net['chosen']}")


@pytest.mark.parametrize("name", LOADED)
def test_a_site_bound_libfabric_wins(project: dict, name: str, tmp_path: Path) -> None:
    """As on LUMI: the host's 1.22 libfabric bound in and put first on the loader path."""
    image = project["images"][name]
    library = manifest(image)["network_plugin"]["library"]
    bound = libfabric_dir(project["images"]["plugin-nccl-724"], tmp_path)
    site_dir = "/opt/cray/libfabric/1.22.0/lib64"
    loaded = dlopen(image, library, "-v", f"{bound}:{site_dir}:ro",
                    "-e", f"LD_LIBRARY_PATH={site_dir}:{image_env(image)['LD_LIBRARY_PATH']}")
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip().startswith(site_dir + "/libfabric.so")


def test_a_plugin_built_against_libfabric_2_does_not_load_on_1_22(
        project: dict, tmp_path: Path) -> None:
    image = project["images"]["plugin-nccl-724-fabric2"]
    elf = manifest(image)["network_plugin"]["elf"]
    assert "fi_getinfo@FABRIC_1.8" in elf["libfabric_symbols"]
    bound = libfabric_dir(project["images"]["plugin-nccl-724"], tmp_path)
    loaded = dlopen(image, elf["library"], "-v", f"{bound}:/site-libfabric:ro",
                    "-e", "LD_LIBRARY_PATH=/site-libfabric")
    assert loaded.returncode != 0
    assert "version `FABRIC_1.8' not found" in loaded.stderr


def test_the_build_check_names_the_missing_version(project: dict, tmp_path: Path) -> None:
    """The plugin stage's check, run on the 2.1-built plugin for a 1.22 site, fails (here,
    with this machine's readelf: the final image keeps no binutils)."""
    image = project["images"]["plugin-nccl-724-fabric2"]
    library = manifest(image)["network_plugin"]["library"]
    container = docker("create", image).stdout.strip()
    try:
        docker("cp", f"{container}:{library}", str(tmp_path / "librccl-net.so"))
    finally:
        docker("rm", container)
    checked = subprocess.run(
        [sys.executable, str(CHECK_SCRIPT), "stage", str(tmp_path / "librccl-net.so"),
         "--libfabric-dir", str(tmp_path / "no-libfabric"), "--built-against", "2.1.0",
         "--max-abi", "FABRIC_1.7", "--oldest", "1.22.0 (site lumi)",
         "--rccl", str(tmp_path / "no-rccl"),
         "--record", str(tmp_path / "record.json")], check=False, capture_output=True,
        text=True)
    assert checked.returncode == 1, checked.stderr
    assert "needs FABRIC_1.8 (" in checked.stderr
    assert "fi_getinfo@FABRIC_1.8" in checked.stderr
    assert "libfabric 1.22.0 (site lumi) does not provide" in checked.stderr
    assert not (tmp_path / "record.json").exists()


def test_rendering_for_a_1_22_site_refuses_libfabric_2(project: dict) -> None:
    root = project["root"]
    text = (root / "recipes" / "plugin-nccl-724-fabric2.yaml").read_text()
    # Frontier binds a 1.22 Cray libfabric too, and runs this base's ROCm 7.2.4 (LUMI does not).
    (root / "recipes" / "plugin-for-lumi.yaml").write_text(
        text.replace("sites: []", "sites:\n- frontier"))
    rendered = imagebuild(root, "render", "plugin-for-lumi")
    assert rendered.returncode == 2
    assert "network_plugin.libfabric.version" in rendered.stderr
    assert "needs FABRIC_1.8" in rendered.stderr and "site frontier" in rendered.stderr
    assert not (root / "dockerfiles" / "plugin-for-lumi").exists()


def test_rccl_7_2_4_refuses_aws_ofi_rccl_at_build_time(project: dict) -> None:
    """aws-ofi-rccl (cxi) exports only ncclNetPlugin_v5; RCCL 7.2.4 looks up v10..v6. The
    plugin stage's check stops the build, naming both, instead of an image whose RCCL would
    silently use its own transport."""
    built = project["refused"]["plugin-rccl-724"]
    assert built.returncode != 0
    output = built.stdout + built.stderr
    assert ("looks up ncclNetPlugin_v10..v6; the plugin librccl-net.so exports only v5"
            in output), output[-3000:]
    assert "librccl.so" in output


# --- rccl-tests against RCCL 7.2.4 ----------------------------------------------------------

RCCL_TESTS_IMAGE = "plugin-nccl-724"
#: The librccl.so.1 each binary resolves, librccl1's version, the package owning that file.
RESOLVE_RCCL = r"""
for b in "$@"; do ldd "$b" | awk -v b="$b" '$1 == "librccl.so.1" {print b, $3}'; done
dpkg-query -W -f '${Version}\n' librccl1
dpkg -S "$(readlink -f /usr/lib/x86_64-linux-gnu/librccl.so.1)"
"""


def test_rccl_tests_are_built_for_each_collective_and_resolve_rccl_7_2_4(project: dict) -> None:
    """Every *_perf binary is in the image, and the loader resolves its librccl.so.1 to the
    file of Debian's librccl1 7.2.4 (RCCL 2.27.7), the image's own RCCL."""
    image = project["images"][RCCL_TESTS_IMAGE]
    entry = manifest(image)["rccl_tests"]
    assert entry["enabled"] and entry["gpu_targets"] == ["gfx942"]
    assert entry["ref"] == "develop" and len(entry["commit"]) == 40
    assert entry["repository"].endswith("/ROCm/rccl-tests.git")
    assert [b.rsplit("/", 1)[-1] for b in entry["binaries"]] == \
        [f"{name}_perf" for name in rccl_tests.COLLECTIVES]
    # bash -c: the binaries are $@, after "ldd" as $0.
    resolved = docker("run", "--rm", image, "bash", "-c", RESOLVE_RCCL, "ldd",
                      *entry["binaries"], check=False)
    assert resolved.returncode == 0, resolved.stderr
    lines = resolved.stdout.splitlines()
    assert lines[:-2] == [f"{b} /usr/lib/x86_64-linux-gnu/librccl.so.1"
                          for b in entry["binaries"]]
    assert lines[-2] == "7.2.4-1~exp3"
    assert lines[-1].split(":")[0] == "librccl1", lines[-1]


def test_rccl_tests_carry_device_code_for_exactly_the_recipes_target(
        project: dict, tmp_path: Path) -> None:
    """Read from the clang offload bundles in each binary's .hip_fatbin section (the stage's
    own check, run here on the binaries copied out of the image): gfx942 only. The same
    check fails them for a recipe that also lists gfx90a."""
    image = project["images"][RCCL_TESTS_IMAGE]
    container = docker("create", image).stdout.strip()
    try:
        docker("cp", f"{container}:/opt/rccl-tests/bin", str(tmp_path / "bin"))
    finally:
        docker("rm", container)
    binaries = ",".join(f"{name}_perf" for name in rccl_tests.COLLECTIVES)
    check = [sys.executable, str(staged(rccl_tests.CHECK, rccl_tests.FOLDER / "check.py")), str(tmp_path / "bin"),
             "--binaries", binaries, "--targets"]
    passed = subprocess.run([*check, "gfx942"], check=False, capture_output=True, text=True)
    assert passed.returncode == 0, passed.stderr
    assert passed.stdout.count("device code for gfx942\n") == len(rccl_tests.COLLECTIVES)
    failed = subprocess.run([*check, "gfx90a,gfx942"], check=False, capture_output=True,
                            text=True)
    assert failed.returncode == 1
    assert "all_reduce_perf: device code for gfx942; missing gfx90a" in failed.stderr


def test_all_reduce_perf_runs_by_name_and_stops_cleanly_without_a_gpu(project: dict) -> None:
    image = project["images"][RCCL_TESTS_IMAGE]
    path = image_env(image)["PATH"].split(":")
    # after the base image's directories (the tuner's probe follows it in this image)
    assert path.index("/opt/rccl-tests/bin") > path.index("/bin")
    helped = docker("run", "--rm", image, "all_reduce_perf", "--help", check=False)
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("USAGE: all_reduce_perf")
    # A login shell (enroot's start) resets PATH; the image's profile.d file restores it.
    found = docker("run", "--rm", image, "bash", "-lc", "command -v sendrecv_perf")
    assert found.stdout.strip() == "/opt/rccl-tests/bin/sendrecv_perf"
    # HIP initialises and finds no GPU here: an error, not a crash or a hang.
    ran = docker("run", "--rm", image, "all_reduce_perf", "-b", "8", "-e", "8", check=False)
    assert ran.returncode != 0
    assert "no ROCm-capable device is detected" in ran.stdout + ran.stderr


# --- the tuner plugin against RCCL 7.2.4 -----------------------------------------------------

TUNER_IMAGE = "plugin-nccl-724"


def test_rccl_7_2_4_refuses_the_example_tuner_as_it_is(project: dict) -> None:
    """The example exports only ncclTunerPlugin_v5; RCCL 7.2.4's librccl looks up v4, v3
    and v2 (read from it by the tuner stage's check): the build stops there, naming both."""
    built = project["refused"]["tuner-724-as-is"]
    assert built.returncode != 0
    output = built.stdout + built.stderr
    assert ("looks up ncclTunerPlugin_v4..v2; the tuner librccl-tuner.so exports only v5: "
            "RCCL would not load it" in output), output[-3000:]
    assert "/usr/lib/x86_64-linux-gnu/librccl.so" in output


def test_the_adapted_tuner_is_what_rccl_7_2_4_looks_up_and_the_image_names_it(
        project: dict) -> None:
    image = project["images"][TUNER_IMAGE]
    tuner = manifest(image)["rccl_tuner"]
    interface = tuner["interface"]
    assert interface["rccl"].startswith("/usr/lib/x86_64-linux-gnu/librccl.so")
    assert interface["rccl_looks_up"] == [4, 3, 2]
    assert interface["plugin_exports"] == [5, 4] and interface["chosen"] == 4
    assert interface["probe"].endswith("-> chosen ring/simple channels default")
    env = image_env(image)
    assert env["NCCL_TUNER_PLUGIN"] == tuner["library"] == interface["library"]
    assert env["NCCL_TUNER_CONFIG_FILE"] == tuner["config"] == "/opt/rccl-tuner/nccl_tuner.conf"
    edf = tomllib.loads((project["root"] / "envs" / f"{TUNER_IMAGE}.toml").read_text())
    for key in ("NCCL_TUNER_PLUGIN", "NCCL_TUNER_CONFIG_FILE"):
        assert edf.get("env", {}).get(key, env[key]) == env[key]
    sbom = json.loads((project["root"] / "artifacts" / f"{TUNER_IMAGE}.cdx.json").read_text())
    source = {c["bom-ref"]: c for c in sbom["components"]}["source:rccl-tuner"]
    assert tuner["source"]["ref"] == "rocm-7.2.4"
    assert source["version"] == tuner["source"]["commit"]
    assert tuner["source"]["repository"].endswith("/ROCm/rccl.git")
    carried = docker("run", "--rm", image, "cat", tuner["config"]).stdout
    assert carried == (project["root"] / "tuning" / "nccl_tuner.conf").read_text()
    # no tuner and no config in an image whose recipe has none
    other = image_env(project["images"]["plugin-rccl-543"])
    assert "NCCL_TUNER_PLUGIN" not in other and "NCCL_TUNER_CONFIG_FILE" not in other
    print(f"\n[tuner] RCCL looks up {interface['rccl_looks_up']}, the tuner exports "
          f"{interface['plugin_exports']}, chosen v{interface['chosen']}")


def test_every_size_row_and_sbom_source_names_its_component(project: dict) -> None:
    """The image with the plugin, rccl-tests and the tuner: its build record's size table has a
    row of its own for each of them, and each source in its SBOM names its component."""
    name = TUNER_IMAGE
    record = json.loads((project["root"] / "artifacts" / f"{name}.build.json").read_text())
    parts = {p["part"]: p["bytes"] for p in record["sizes"]["parts"]}
    assert list(parts) == ["base image", "OS packages added", "venv",
                           "network plugin + libfabric", "rccl-tests", "RCCL tuner", "other"]
    assert all(parts[part] > 0 for part in ("network plugin + libfabric", "rccl-tests",
                                            "RCCL tuner"))
    sbom = json.loads((project["root"] / "artifacts" / f"{name}.cdx.json").read_text())
    named = {c["bom-ref"]: [p["value"] for p in c.get("properties", [])
                            if p["name"] == "imagebuild:component"]
             for c in sbom["components"] if c["bom-ref"].startswith("source:")}
    assert named == {"source:aws-ofi-nccl": ["network_plugin"],
                     "source:libfabric": ["network_plugin"],
                     "source:rccl-tests": ["rccl_tests"], "source:rccl-tuner": ["rccl_tuner"]}
    files = {p["part"]: p["files"] for p in record["sizes"]["parts"]}
    print(f"\n[sizes] {name}: " + ", ".join(f"{part} {size:,} bytes in {files[part]} files"
                                            for part, size in parts.items()))


def test_a_tune_rccl_config_changes_the_choice_in_the_image_for_its_sizes_only(
        project: dict) -> None:
    """The configuration `imagebuild tune rccl` wrote from SWEEP is in the image
    (rccl_tuner.config); its probe dlopens the tuner as RCCL 2.27 does (ncclTunerPlugin_v4,
    init, getCollInfo on a cost table), with the image's NCCL_TUNER_CONFIG_FILE and with one
    that names no file."""
    image = project["images"][TUNER_IMAGE]
    sizes = ("1000", "65536", "65537", "1048576", "1048577", "67108864")
    script = ('for s in "$@"; do rccl-tuner-probe "$NCCL_TUNER_PLUGIN" allreduce "$s" 1 8; '
              'done; rccl-tuner-probe "$NCCL_TUNER_PLUGIN" allreduce 1000 2 16')

    def chosen(*run_args: str) -> list[str]:
        ran = docker("run", "--rm", *run_args, image, "bash", "-c", script, "probe", *sizes,
                     check=False)
        assert ran.returncode == 0, ran.stderr
        print("\n" + ran.stdout)
        return [line.split("-> chosen ")[1].split()[0] for line in ran.stdout.splitlines()]

    untuned = chosen("-e", "NCCL_TUNER_CONFIG_FILE=/nonexistent")
    tuned = chosen()
    assert untuned == ["tree/ll", "tree/ll128", "tree/ll128", "ring/simple", "ring/simple",
                       "ring/simple", "tree/ll"]
    # the named sizes on 1 node x 8 ranks change; larger sizes and 2 x 16 keep the model's
    assert tuned == ["ring/ll", "ring/ll", "tree/simple", "tree/simple", "ring/simple",
                     "ring/simple", "tree/ll"]


def test_the_tuner_in_the_image_records_what_it_is_asked(project: dict) -> None:
    """IMAGEBUILD_TUNER_RECORD=DIR: the adapter built in the image records each distinct
    request once per process (what `imagebuild tune rccl --records DIR` reads)."""
    image = project["images"][TUNER_IMAGE]
    script = ('mkdir -p /tmp/record && IMAGEBUILD_TUNER_RECORD=/tmp/record '
              'rccl-tuner-probe "$NCCL_TUNER_PLUGIN" reducescatter 4096,302006272,4096 1 8 '
              '>/dev/null && cat /tmp/record/tuner-*.csv')
    ran = docker("run", "--rm", image, "bash", "-c", script, check=False)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["collective,bytes,num_pipe_ops,reg_buff,n_ranks,n_nodes",
                                       "reducescatter,4096,1,0,8,1",
                                       "reducescatter,302006272,1,0,8,1"]
