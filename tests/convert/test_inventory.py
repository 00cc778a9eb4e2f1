"""The SBOM's components from a ROCm lock (each image component's pinned sources, named by
their component; wheels, base image), its schema validity, and the size table (a row per
component part) and leftovers from a crafted image stream."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from imagebuild.build.inventory import inventory_inputs, inventory_scan
from imagebuild.convert.inventory import component_counts
from imagebuild.convert.sbom import (
    IMAGE_SBOM,
    dpkg_packages,
    image_sbom,
    sbom_json,
    validation_errors,
)
from imagebuild.convert.scan import scan_tar
from imagebuild.convert.sizes import (
    BASE,
    OS_PACKAGES,
    OTHER,
    VENV_PART,
    PartLayout,
    classify,
    leftovers,
    size_table,
)
from imagebuild.convert.tarfilter import filter_rootfs_tar
from imagebuild.recipe.load import load_recipe
from imagebuild.render.plan import plan_for
from tests.support.render import write_lock

REPO = Path(__file__).resolve().parents[2]

DPKG_STATUS = """\
Package: libc6
Status: install ok installed
Priority: optional
Architecture: amd64
Multi-Arch: same
Source: glibc
Version: 2.36-9+deb12u10
Maintainer: GNU Libc Maintainers <debian-glibc@lists.debian.org>
Description: GNU C Library: Shared libraries
 Contains the standard libraries.
Homepage: https://www.gnu.org/software/libc/libc.html

Package: libhwloc15
Status: install ok installed
Architecture: amd64
Source: hwloc
Version: 2.9.0-1
Description: Hierarchical view of the machine - shared libs

Package: removed-one
Status: deinstall ok config-files
Architecture: all
Version: 1.0
"""


@pytest.fixture(scope="module")
def rocm(tmp_path_factory: pytest.TempPathFactory):
    recipe = load_recipe("rocm-7.0.2", REPO)
    lock = write_lock(recipe, tmp_path_factory.mktemp("lock") / "pylock.rocm-7.0.2.toml")
    return recipe, lock, plan_for(recipe, lock)


def _sbom(rocm) -> dict:
    _recipe, _lock, plan = rocm
    inputs, _layout = inventory_inputs(plan)
    text = sbom_json(image_sbom(inputs, DPKG_STATUS, {"ID": "ubuntu", "VERSION_ID": "24.04"},
                                1_700_000_000))
    assert validation_errors(text) is None
    return json.loads(text)


def test_sbom_names_each_source_built_component_with_its_pin(rocm):
    _recipe, lock, _plan = rocm
    components = {c["bom-ref"]: c for c in _sbom(rocm)["components"]}
    hip = components["source:hipblaslt"]
    assert hip["version"] == lock.git("hipblaslt").commit
    # rocm-libraries keeps hipBLASLt in a subdirectory: the purl's subpath says which
    assert hip["purl"] == f"pkg:github/rocm/rocm-libraries@{lock.git('hipblaslt').commit}" \
                          "#projects/hipblaslt"
    assert hip["externalReferences"][0] == {"type": "vcs", "url": lock.git("hipblaslt").repository}
    plugin = components["source:aws-ofi-nccl"]
    assert plugin["purl"] == f"pkg:github/aws/aws-ofi-nccl@{lock.git('network-plugin').commit}"
    libfabric = components["source:libfabric"]
    assert libfabric["version"] == "1.22.0"
    assert libfabric["hashes"] == [{"alg": "SHA-256", "content": lock.archive("libfabric").sha256}]
    assert libfabric["externalReferences"][0]["url"] == lock.archive("libfabric").url
    tests = components["source:rccl-tests"]
    assert tests["version"] == lock.git("rccl-tests").commit
    assert tests["purl"] == f"pkg:github/rocm/rccl-tests@{lock.git('rccl-tests').commit}"
    assert tests["externalReferences"][0] == {"type": "vcs", "url": lock.git("rccl-tests").repository}
    megatron = components["source:megatron-lm"]
    assert megatron["version"] == lock.git("megatron").commit
    # every row of a source names the component it belongs to
    named = {ref: {p["value"] for p in c["properties"] if p["name"] == "imagebuild:component"}
             for ref, c in components.items() if ref.startswith("source:")}
    assert named == {"source:hipblaslt": {"hipblaslt"}, "source:aocl-blis": {"hipblaslt"},
                     "source:aws-ofi-nccl": {"network_plugin"},
                     "source:libfabric": {"network_plugin"}, "source:rccl-tests": {"rccl_tests"},
                     "source:rccl-tuner": {"rccl_tuner"},
                     "source:transformer-engine": {"transformer_engine"},
                     "source:megatron-lm": {"megatron"}}
    base = components["base-image"]
    assert base["version"] == lock.base_digest and base["type"] == "container"
    assert "repository_url=docker.io/rocm/dev-ubuntu-24.04" in base["purl"]


def test_sbom_names_the_tuners_rccl_commit_and_directory(rocm):
    _recipe, lock, _plan = rocm
    tuner = {c["bom-ref"]: c for c in _sbom(rocm)["components"]}["source:rccl-tuner"]
    commit = lock.git("rccl-tuner").commit
    assert tuner["version"] == commit
    assert tuner["purl"] == f"pkg:github/rocm/rccl@{commit}#ext-tuner/example"
    assert {"name": "imagebuild:subdir", "value": "ext-tuner/example"} in tuner["properties"]
    assert {"name": "imagebuild:component", "value": "rccl_tuner"} in tuner["properties"]


def test_sbom_names_the_submodules_a_component_was_built_with(rocm):
    """From the image's manifest (what the TransformerEngine stage checked out); the scan
    captures the manifest from the image's files."""
    _recipe, _lock, plan = rocm
    inputs, _layout = inventory_inputs(plan)
    commit = "a" * 40
    manifest = {"transformer_engine": {"submodules": [
        {"path": "3rdparty/googletest", "commit": commit,
         "url": "https://github.com/google/googletest.git"},
        {"path": "3rdparty/unknown-url", "commit": "b" * 40}]}, "hipblaslt": {"enabled": True}}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        data = json.dumps(manifest).encode()
        info = tarfile.TarInfo("opt/imagebuild/manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    scanned = scan_tar(buffer, inventory_scan(plan, 0))
    text = sbom_json(image_sbom(inputs, DPKG_STATUS, {}, 1_700_000_000, scanned.manifest()))
    assert validation_errors(text) is None
    components = {c["bom-ref"]: c for c in json.loads(text)["components"]}
    googletest = components["source:transformer_engine/3rdparty/googletest"]
    assert googletest["version"] == commit
    assert googletest["purl"] == f"pkg:github/google/googletest@{commit}"
    assert {"name": "imagebuild:submodule-of", "value": "transformer_engine"} in googletest[
        "properties"]
    assert components["source:transformer_engine/3rdparty/unknown-url"]["version"] == "b" * 40
    # Without a manifest (an image built before it): no such rows.
    assert not any("3rdparty" in ref for ref in {c["bom-ref"] for c in _sbom(rocm)["components"]})


def test_sbom_lists_every_wheel_and_installed_deb(rocm):
    _recipe, lock, _plan = rocm
    bom = _sbom(rocm)
    wheels = {c["name"]: c for c in bom["components"] if c["purl"].startswith("pkg:pypi/")}
    assert set(wheels) == {w.name for w in lock.wheels}
    for wheel in lock.wheels:
        entry = wheels[wheel.name]
        assert entry["hashes"] == [{"alg": "SHA-256", "content": wheel.sha256}]
        assert entry["externalReferences"][0]["url"] == wheel.url
        assert entry["purl"].startswith(f"pkg:pypi/{wheel.name}@")
    debs = sorted(c["purl"] for c in bom["components"] if c["purl"].startswith("pkg:deb/"))
    assert debs == [
        "pkg:deb/ubuntu/libc6@2.36-9%2Bdeb12u10?arch=amd64&distro=ubuntu-24.04&upstream=glibc",
        "pkg:deb/ubuntu/libhwloc15@2.9.0-1?arch=amd64&distro=ubuntu-24.04&upstream=hwloc"]
    assert bom["metadata"]["component"]["version"] == lock.file_hash()
    # every component hangs off the image
    image_deps = next(d for d in bom["dependencies"] if d["ref"] == "image")
    assert len(image_deps["dependsOn"]) == len(bom["components"])


def test_sbom_bytes_depend_only_on_their_inputs(rocm):
    assert _sbom(rocm) == _sbom(rocm)
    assert _sbom(rocm)["metadata"]["timestamp"] == "2023-11-14T22:13:20+00:00"


def test_dpkg_status_keeps_installed_packages_only():
    assert [p.name for p in dpkg_packages(DPKG_STATUS)] == ["libc6", "libhwloc15"]


# --- size table and leftovers from a crafted stream -------------------------------------------

def _image_tar(files: dict[str, bytes]) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("lib")
        link.type, link.linkname = tarfile.SYMTYPE, "usr/lib"
        tar.addfile(link)
    buffer.seek(0)
    return buffer


def _crafted(plan) -> dict[str, bytes]:
    return {
        "usr/lib/x86_64-linux-gnu/libc.so.6": b"c" * 2000,
        "usr/lib/x86_64-linux-gnu/libhwloc.so.15": b"h" * 300,
        "var/lib/dpkg/status": DPKG_STATUS.encode(),
        "var/lib/dpkg/info/libc6:amd64.list": b"/.\n/lib/x86_64-linux-gnu/libc.so.6\n",
        # usrmerge: dpkg says /lib, the file is in /usr/lib
        "var/lib/dpkg/info/libhwloc15:amd64.list": b"/lib/x86_64-linux-gnu/libhwloc.so.15\n",
        "opt/venv/lib/python3.12/site-packages/torch/__init__.py": b"v" * 5000,
        "opt/hipblaslt/lib/libhipblaslt.so.1": b"b" * 4000,
        "opt/hipblaslt/tuning/build/release/CMakeCache.txt": b"k" * 700,
        "opt/aws-ofi-nccl/lib/librccl-net.so": b"p" * 100,
        "opt/libfabric/lib/libfabric.so.1": b"f" * 200,
        "opt/rccl-tests/bin/all_reduce_perf": b"t" * 60,
        "opt/rccl-tuner/lib/librccl-tuner.so": b"u" * 40,
        "opt/megatron-lm/pretrain_gpt.py": b"m" * 80,
        "opt/imagebuild/manifest.json": b"{}",
        "usr/include/stdio.h": b"i" * 10,
        "opt/venv/lib/python3.12/site-packages/torch/include/ATen/ATen.h": b"a",
        "var/cache/apt/archives/libhwloc15_2.9.0-1_amd64.deb": b"d" * 30,
    }


def test_size_table_sums_the_image_by_part(rocm):
    _recipe, _lock, plan = rocm
    files = _crafted(plan)
    scan = inventory_scan(plan, 0)
    out = io.BytesIO()
    filter_rootfs_tar(_image_tar(files), out, observer=scan)
    parts = classify(scan.files, scan.package_files(), scan.layout)
    table = size_table(scan.files, parts, scan.layout)
    sizes = {part: size for part, size, _ in table.rows}
    # a row for each component's part, named by the component, in the registry's order
    assert [part for part, _, _ in table.rows] == [
        BASE, OS_PACKAGES, VENV_PART, "hipBLASLt tuning kit", "hipBLASLt",
        "network plugin + libfabric", "rccl-tests", "RCCL tuner", "Megatron-LM", OTHER]
    assert table.total == sum(len(d) for d in files.values()) == scan.total
    assert sizes[OS_PACKAGES] == 300  # libhwloc15: installed by the final stage for the plugin
    assert sizes[VENV_PART] == 5001
    assert sizes["hipBLASLt"] == 4000 and sizes["hipBLASLt tuning kit"] == 700
    assert sizes["network plugin + libfabric"] == 300
    assert sizes["rccl-tests"] == 60 and sizes["Megatron-LM"] == 80
    assert sizes["RCCL tuner"] == 40
    assert sizes[OTHER] == 2
    assert sizes[BASE] == table.total - 300 - 5001 - 4700 - 300 - 60 - 40 - 80 - 2
    # the SBOM went into the stream, made from the image's own dpkg database
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        sbom = json.loads(tar.extractfile(IMAGE_SBOM).read())
    assert component_counts(json.dumps(sbom))["deb"] == 2
    assert "total" in table.lines()[-1]


def test_a_package_pinned_to_a_version_counts_as_added():
    """os_packages may pin a version (name=version, as apt takes it); dpkg lists the package
    by its name, so its files are the OS packages' part, not the base image's."""
    layout = PartLayout.of([], ("librccl1=7.2.4-1~exp3", "libhwloc15"))
    assert layout.packages == {"librccl1", "libhwloc15"}
    library = "usr/lib/x86_64-linux-gnu/librccl.so.1.0"
    parts = classify({library: 370, "usr/bin/bash": 10}, {"librccl1:amd64": [library]}, layout)
    assert parts == {library: OS_PACKAGES, "usr/bin/bash": BASE}


def test_an_image_file_at_the_sbom_path_is_replaced(rocm):
    _recipe, _lock, plan = rocm
    out = io.BytesIO()
    filter_rootfs_tar(_image_tar({IMAGE_SBOM: b"stale", **_crafted(plan)}), out,
                      observer=inventory_scan(plan, 0))
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        names = tar.getnames()
        assert names.count(IMAGE_SBOM) == 1
        assert json.loads(tar.extractfile(IMAGE_SBOM).read())["bomFormat"] == "CycloneDX"


def test_leftovers_finds_build_only_files_but_keeps_the_tuning_kit(rocm):
    _recipe, _lock, plan = rocm
    scan = scan_tar(_image_tar(_crafted(plan)), inventory_scan(plan, 0))
    assert scan.layout.keep == ("/opt/hipblaslt/tuning",)
    found = leftovers([*scan.files, "opt/hipblaslt/include/hipblaslt/hipblaslt.h"],
                      keep=scan.layout.keep)
    assert found == {"headers": ["opt/hipblaslt/include/hipblaslt/hipblaslt.h",
                                 "usr/include/stdio.h"],
                     "package caches": ["var/cache/apt/archives/libhwloc15_2.9.0-1_amd64.deb"]}
    assert "build trees" in leftovers(scan.files)
