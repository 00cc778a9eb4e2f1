"""The images the squash benchmarks measure, read as ``imagebuild squash`` reads them: the CPU
demo recipe's image and a ROCm-like image of a few large libraries, made here when missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from imagebuild.convert.sources import ImageSource
from imagebuild.engine.select import open_engine

LIBS_IMAGE = "imagebuild-bench/torch:latest"
DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"


def docker_source(image: str) -> ImageSource:
    """``image`` in the Docker engine, read as ``imagebuild squash --backend docker`` reads it."""
    return open_engine("docker", for_build=False).image_source(image)


def image_exists(ref: str) -> bool:
    return subprocess.run([DOCKER, "image", "inspect", ref], capture_output=True,
                          check=False).returncode == 0


def make_libs_image(work: Path) -> str:
    """Debian minbase (the test base's cached debootstrap) + the CPU torch wheel unpacked in
    site-packages, imported as one layer."""
    if image_exists(LIBS_IMAGE):
        return LIBS_IMAGE
    from testbed.base_images import base_rootfs_tarball
    from testbed.cpu_recipe import torch_wheel

    wheel = next(Path("/opt/wheels").glob("torch-*cp311*.whl"), None) or torch_wheel()
    print(f"making {LIBS_IMAGE}: Debian minbase + {wheel.name} ...", flush=True)
    rootfs = work / "libs-rootfs"
    rootfs.mkdir()
    subprocess.run(["tar", "-C", str(rootfs), "-xpf", str(base_rootfs_tarball())], check=True)
    site = rootfs / "usr/local/lib/python3.11/dist-packages"
    site.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."],
                           stdout=subprocess.PIPE)
    subprocess.run([DOCKER, "import", "-c", ("ENV PATH=/usr/local/sbin:/usr/local/bin:"
                    "/usr/sbin:/usr/bin:/sbin:/bin"), "-c", "WORKDIR /workspace",
                    "-c", 'CMD ["/bin/bash"]', "-", LIBS_IMAGE],
                   stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL)
    tar.wait()
    shutil.rmtree(rootfs, ignore_errors=True)
    return LIBS_IMAGE


def make_demo_image(work: Path) -> str:
    """The demo recipe locked and built as scripts/demo does (without squash/validate)."""
    from testbed.cpu_recipe import DEMO_IMAGE, DEMO_RECIPE, demo_project

    if image_exists(DEMO_IMAGE):
        return DEMO_IMAGE
    from imagebuild.cli import main
    from testbed.wheel_index import IndexServer

    print(f"making {DEMO_IMAGE}: lock and build the demo recipe ...", flush=True)
    project = work / "demo-project"
    index = demo_project(project)
    saved = dict(os.environ)
    os.environ["IMAGEBUILD_PROJECT"] = str(project)
    if Path("/etc/ssl/certs/ca-certificates.crt").is_file():
        os.environ.setdefault("IMAGEBUILD_SITE_CA", "/etc/ssl/certs/ca-certificates.crt")
    try:
        with IndexServer(index) as server:
            for argv in (["lock", DEMO_RECIPE, "--index-url", server.url_for("cpu/")],
                         ["build", DEMO_RECIPE]):
                if main(argv) != 0:
                    raise SystemExit(f"imagebuild {' '.join(argv)} failed")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return DEMO_IMAGE


def content_of(image: str) -> tuple[int, int]:
    """(file bytes, members) of the image's filesystem."""
    size = members = 0
    with docker_source(image).rootfs_tar() as stream, \
            tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            members += 1
            size += member.size if member.isreg() else 0
    return size, members


MAKERS = {"demo": make_demo_image, "libs": make_libs_image}
