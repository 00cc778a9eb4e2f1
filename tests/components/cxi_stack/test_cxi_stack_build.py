"""The image's own Slingshot stack, built for real and the network plugin built on it.

A recipe with the shipped rocm-7.2.4's network plugin (aws-ofi-nccl v1.21.1) and a
``cxi_stack`` section (HPE's cassini-headers, cxi-driver headers and libcxi at
release/shs-13.1.0, libfabric 2.6.0 with its cxi provider: the stack CSCS builds into its own
Beverin images) is locked and built by ``imagebuild lock`` + ``imagebuild build`` on sid with
experimental's ROCm 7.2.4 (RCCL 2.27.7), the sources served by the fixture mirror as at an
air-gapped site (testbed/source_mirror.py). Proven in the built image:

- the cxi-stack stage's check passed (the build would have stopped): ``fi_info -l`` of the
  image's libfabric lists ``cxi``, run here again in the final image, and libfabric resolves
  the image's libcxi;
- the plugin is built against that libfabric, not one of its own: its stage is built on the
  cxi-stack stage, the plugin dlopens with /opt/cxi-stack/lib/libfabric.so.1 and the image
  has no /opt/libfabric; the lock pins no libfabric archive for it;
- the plugin passes the interface check against RCCL 7.2.4: the build read the lookups of
  librccl.so.1 and the plugin's exports and chose one both have (v10).

No Cassini NIC here: ``fi_info -p cxi`` would find no device. A compiled, loadable provider
is what a build can prove; the fabric itself is proven on the cluster.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

from imagebuild.components.cxi_stack import component as cxi_stack
from imagebuild.images import latest_tag
from testbed import base_images
from testbed.cli import run_imagebuild
from testbed.plugin_recipe import SID_ROCM_7_2_4, cxi_stack_recipe, placeholder_torch
from testbed.source_mirror import SourceMirror
from tests.support.indexserver import IndexServer

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

DOCKER = "/usr/bin/docker"
NAME = "cxi-stack-724"
#: What RCCL 7.2.4 looks up and what aws-ofi-nccl v1.21.1 exports (as in the plugin
#: stage's test on the image's plain libfabric).
RCCL_LOOKS_UP, PLUGIN_EXPORTS = [10, 9, 8, 7, 6], list(range(12, 5, -1))


def imagebuild(project: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return run_imagebuild(project, *argv, timeout=2400)


def docker(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *argv], capture_output=True, text=True, check=check,
                          timeout=300)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, docker_engine, local_registry: str
          ) -> dict:
    base_images.import_base_image_docker(docker_engine, SID_ROCM_7_2_4.base)
    base = base_images.push_base_image(docker_engine, SID_ROCM_7_2_4.base)
    root = tmp_path_factory.mktemp("cxi-stack-project")
    (root / "recipes").mkdir()
    placeholder_torch(root / "index" / "whl")
    with IndexServer(root / "index") as index, SourceMirror(root / "mirror") as mirror:
        (root / "recipes" / f"{NAME}.yaml").write_text(cxi_stack_recipe(base, index.url_for("whl/")))
        mirrors = [f"--git-mirror={src}={dst}" for src, dst in mirror.mirrors.items()]
        locked = imagebuild(root, "lock", NAME, *mirrors)
        assert locked.returncode == 0, locked.stderr[-3000:]
        started = time.monotonic()
        build = imagebuild(root, "build", NAME)
        seconds = time.monotonic() - started
    print(f"\n[cxi-stack] {NAME}: build {seconds:.0f} s\n{build.stdout[-2500:]}")
    assert build.returncode == 0, (build.stdout[-3000:], build.stderr[-3000:])
    return {"root": root, "image": latest_tag(NAME), "seconds": seconds}


def run(image: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return docker("run", "--rm", image, *argv, check=False)


def manifest(image: str) -> dict:
    return json.loads(run(image, "cat", "/opt/imagebuild/manifest.json").stdout)


def test_fi_info_lists_the_cxi_provider_in_the_image(built: dict) -> None:
    listed = run(built["image"], f"{cxi_stack.PREFIX}/bin/fi_info", "-l")
    assert listed.returncode == 0, listed.stderr
    # One "<name>:" line per provider, its details indented under it (fi_info(1), -l).
    providers = re.findall(r"^([a-z0-9_;]+):", listed.stdout, re.MULTILINE)
    assert "cxi" in providers, listed.stdout
    record = json.loads(run(built["image"], "cat", cxi_stack.RECORD).stdout)
    assert "cxi" in record["providers"]
    # libfabric resolves the image's own libcxi (and the build kept no other libfabric).
    ldd = run(built["image"], "ldd", f"{cxi_stack.PREFIX}/lib/libfabric.so.1").stdout
    assert f"libcxi.so.1 => {cxi_stack.PREFIX}/lib/libcxi.so.1" in ldd, ldd
    assert run(built["image"], "test", "-e", "/opt/libfabric").returncode != 0
    size = run(built["image"], "du", "-sk", cxi_stack.PREFIX).stdout.split()[0]
    print(f"\n[cxi-stack] {cxi_stack.PREFIX} in the image: {int(size) / 1024:.1f} MiB; "
          f"providers: {', '.join(providers)}")


def test_the_plugin_is_built_against_the_image_stack_and_loads_it(built: dict) -> None:
    image = built["image"]
    plugin = manifest(image)["network_plugin"]
    assert plugin["libfabric"] == {"version": "2.6.0", "from": "cxi-stack",
                                   "prefix": cxi_stack.PREFIX}
    elf = plugin["elf"]
    assert "libfabric.so.1" in elf["needed"] and elf["rpath"] == [] and elf["runpath"] == []
    code = ("import ctypes, os, sys\n"
            "ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW)\n"
            "print([p for p in open('/proc/self/maps').read().split() if 'libfabric.so' in p][0])")
    loaded = run(image, "python3", "-c", code, plugin["library"])
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip().startswith(f"{cxi_stack.PREFIX}/lib/libfabric.so")
    # The lock pins the CXI sources and no archive of a libfabric the plugin would build.
    lock = tomllib.loads((built["root"] / "recipes" / f"pylock.{NAME}.toml").read_text())
    sources = json.dumps(lock)
    for key in ("shs-cassini-headers", "shs-cxi-driver", "shs-libcxi", "cxi-libfabric"):
        assert key in sources, key
    assert '"libfabric"' not in sources


def test_the_plugin_passes_the_interface_check_against_rccl_7_2_4(built: dict) -> None:
    net = manifest(built["image"])["network_plugin"]["elf"]["net_interface"]
    assert "librccl.so" in net["rccl"]
    assert (net["rccl_looks_up"], net["plugin_exports"]) == (RCCL_LOOKS_UP, PLUGIN_EXPORTS)
    assert net["chosen"] == 10
    print(f"\n[cxi-stack] RCCL 7.2.4 looks up {net['rccl_looks_up']}, the plugin on the CXI "
          f"stack exports {net['plugin_exports']}, chosen v{net['chosen']}; image "
          f"{int(json.loads(docker('image', 'inspect', built['image']).stdout)[0]['Size']) / 1e6:.0f} MB")
