#!/usr/bin/env python3
"""Build-side timings on the real engines: engine detection, base image (debootstrap +
import), a first build, a fully cached rebuild, and the label lookup a no-op build needs.

    .venv/bin/python benchmarks/build_engine.py [--backend docker|podman|both] [--fresh-base]

Prints one line per measurement (seconds). --fresh-base also times debootstrap + tar into
a scratch cache directory and `docker import` of it under a scratch tag (the shared cache
and base image used by tests are left alone).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagebuild.engine.build import SITE_CA_SECRET_ID, build_image
from imagebuild.engine.select import open_engine
from testbed import base_images

#: The engine tests' multistage build (cache mount, secret, parallel stages), read as data.
MULTISTAGE = REPO / "tests" / "engine" / "dockerfiles" / "multistage"


def timed(label: str, func, *args, **kwargs):
    started = time.perf_counter()
    result = func(*args, **kwargs)
    print(f"{label:<44} {time.perf_counter() - started:8.2f} s", flush=True)
    return result


def bench(backend: str, fresh_base: bool) -> None:
    engine = timed(f"[{backend}] open_engine", open_engine, backend)
    print(f"[{backend}] engine: {engine.describe()}")
    importer = (base_images.import_base_image_docker if backend == "docker"
                else base_images.import_base_image_podman)
    base = timed(f"[{backend}] base image (import, tarball cached)", importer, engine)
    run_id = uuid.uuid4().hex[:12]
    tag = f"imagebuild-bench/multistage:{run_id}"
    with tempfile.TemporaryDirectory() as tmp:
        ca = Path(tmp) / "ca.pem"
        ca.write_text("bench")
        kwargs = {"build_args": {"BASE": base, "RUN_ID": run_id},
                      "secrets": {SITE_CA_SECRET_ID: ca}, "log_path": Path(tmp) / "build.log"}
        try:
            timed(f"[{backend}] first build (5 steps)", build_image, engine,
                  MULTISTAGE / "Dockerfile", MULTISTAGE, [tag], **kwargs)
            timed(f"[{backend}] fully cached rebuild", build_image, engine,
                  MULTISTAGE / "Dockerfile", MULTISTAGE, [tag], **kwargs)
            timed(f"[{backend}] image_labels (no-op check)", engine.image_labels, tag)
        finally:
            engine.remove(tag)


def fresh_base() -> None:
    shared = os.environ.get("IMAGEBUILD_TEST_CACHE")
    with tempfile.TemporaryDirectory(prefix="bench-debootstrap-") as scratch:
        os.environ["IMAGEBUILD_TEST_CACHE"] = scratch
        try:
            tarball = timed("debootstrap + tar (fresh)", base_images.base_rootfs_tarball)
        finally:
            if shared is None:
                del os.environ["IMAGEBUILD_TEST_CACHE"]
            else:
                os.environ["IMAGEBUILD_TEST_CACHE"] = shared
        print(f"{'rootfs tarball size':<44} {tarball.stat().st_size / 2**20:8.1f} MiB")
        docker = open_engine("docker")
        scratch_tag = f"imagebuild-bench/debian:{uuid.uuid4().hex[:12]}"
        repository, tag = scratch_tag.split(":")
        with open(tarball, "rb") as data:
            timed("docker import", docker.client.api.import_image_from_data, data,
                  repository=repository, tag=tag, changes=list(base_images.IMPORT_CHANGES))
        docker.remove(scratch_tag)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("docker", "podman", "both"), default="both")
    parser.add_argument("--fresh-base", action="store_true")
    args = parser.parse_args()
    if args.fresh_base:
        fresh_base()
    timed("auto open_engine", open_engine)
    for backend in (("docker", "podman") if args.backend == "both" else (args.backend,)):
        bench(backend, args.fresh_base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
