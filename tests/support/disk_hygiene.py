"""Keep the suite's disk footprint bounded, so a full run fits a CI machine's free space.

A full run builds a dozen images that each carry a CPU torch (~0.9 GB a layer, never shared
between recipes), squashes them and keeps per-test project folders: left alone, it grew the
disk by 36 GB on a fresh machine. Two things keep it bounded:

* every folder a test or a module-scoped fixture made with ``tmp_path_factory`` is removed
  when its module ends, unless a test of that module failed (then it stays for debugging);
  folders made by session-scoped fixtures stay until the session ends;
* after a module that used the Docker engine, if the engine holds more than the budget
  (``IMAGEBUILD_TEST_ENGINE_BUDGET_GB``, default 5), the images the tests built are removed
  and the build cache's layer records pruned. The base images (``imagebuild-test/*``) and
  the cache mounts (uv's download cache) stay; a later module that needs an image builds it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import docker
import docker.errors

GIB = 1 << 30
BASE_IMAGE_MARK = "imagebuild-test/"


def engine_budget_bytes() -> int:
    return int(float(os.environ.get("IMAGEBUILD_TEST_ENGINE_BUDGET_GB", "5")) * GIB)


def docker_footprint(client: docker.DockerClient) -> int:
    """Bytes the engine holds: unique image layers plus build-cache records of its own."""
    usage = client.df()
    cache = sum(record.get("Size", 0) for record in usage.get("BuildCache") or []
                if not record.get("Shared"))
    return int(usage.get("LayersSize") or 0) + cache


def is_base_image(tags: list[str]) -> bool:
    return any(BASE_IMAGE_MARK in tag for tag in tags)


def reclaim_docker(client: docker.DockerClient) -> int:
    """Remove test-built images and the build cache's layer records; returns bytes freed."""
    before = docker_footprint(client)
    client.containers.prune()
    for image in client.images.list(all=False):
        if is_base_image(image.tags):
            continue
        try:
            client.images.remove(image.id, force=True, noprune=False)
        except docker.errors.APIError:
            pass  # still used by a base image's child or already gone: the prune follows
    # type=regular: layer records only; uv's cache mount (exec.cachemount) stays warm.
    client.api.prune_builds(filters={"type": ["regular"]}, all=True)
    return max(0, before - docker_footprint(client))


def remove_folders(paths: list[Path]) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
