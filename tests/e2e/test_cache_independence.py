"""The build cache cannot change the bytes of an image's squashfs.

The CPU demo recipe is locked and built (filling the layer cache and the uv cache mount), then
locked again to the same pins at a later time, so with a later SOURCE_DATE_EPOCH, like a
lock written in another checkout. That lock is built twice: once on top of everything the first
build left (its layers and its uv cache), once clean (no layer cache, the uv cache mount
emptied). The two squashfs files must be the same bytes. Before every file the build writes
was dated by the lock's epoch, the first one carried the earlier build's times in its venv
(21,777 of 31,152 paths: the python stage's layers and the final stage's copies of them
came from the earlier build, and the squash's clamp only lowers later mtimes).

Cost: a first build (mostly from the layers the other end-to-end tests left), a build on
its caches, a clean build, two squashes: 75 to 100 s on two cores, the base image and wheels
present (printed below).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.convert.reproducible import compare_squashfs, report_lines
from imagebuild.images import latest_tag
from imagebuild.lock.lockfile import lock_path, read_lock
from imagebuild.recipe.load import load_recipe
from testbed.cpu_recipe import torch_wheel, write_recipe
from tests.support.engine_env import imagebuild_env

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

NAME = "cpu-cache-proof"



def empty_uv_cache_mount() -> None:
    """Remove BuildKit's uv cache mount (the python stage's ``--mount=type=cache`` on
    /root/.cache/uv) and nothing else: other tests' and users' cache mounts stay. Docker
    20.10 prunes by record id only (``id`` is the one filter it matches by pattern), so the
    records are found by their description first."""
    listing = subprocess.run(["docker", "system", "df", "-v", "--format", "{{json .BuildCache}}"],
                             check=True, capture_output=True, text=True).stdout
    records = [r for r in json.loads(listing) or []
               if r.get("CacheType") == "exec.cachemount"
               and r.get("Description", "").startswith("cached mount /root/.cache/uv from")]
    assert records, "no uv cache mount: the first builds did not fill one"
    for record in records:
        subprocess.run(["docker", "builder", "prune", "--force",
                        "--filter", "id=" + record["ID"].rstrip("*")],
                       check=True, capture_output=True)


def run(*args: str) -> None:
    code = main(list(args))
    assert code == 0, f"imagebuild {' '.join(args)} exited {code}"


def relock_later(project: Path, index_url: str) -> int:
    """Lock the recipe again, to the same pins, at a later second than anything built so far
    (a re-lock of unchanged pins keeps the old time: the lock file is removed first)."""
    path = lock_path(load_recipe(NAME, project))
    earlier = read_lock(path).source_date_epoch
    assert earlier is not None
    time.sleep(max(0.0, earlier + 1 - time.time()) + 1.0)
    path.unlink()
    run("lock", NAME, "--index-url", index_url)
    later = read_lock(path).source_date_epoch
    assert later is not None and later > earlier
    return later


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, registry_base_image: str, wheel_index,
            docker_engine) -> Path:
    root = tmp_path_factory.mktemp("cache-proof")
    write_recipe(root, NAME, registry_base_image)
    with imagebuild_env(root, tmp_path_factory.mktemp("cache"), unset=("SOURCE_DATE_EPOCH",)):
        yield root


@pytest.fixture
def images() -> Iterator[list[str]]:
    """IDs of the images the test builds, removed afterwards: each holds its own venv layer
    (about 1 GB), and the tags move on, so the earlier ones would stay behind untagged."""
    built: list[str] = []
    yield built
    for image_id in built:
        subprocess.run(["docker", "rmi", "--force", image_id], check=False, capture_output=True)


def built_image() -> str:
    return subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", latest_tag(NAME)],
                          check=True, capture_output=True, text=True).stdout.strip()


def test_a_build_on_another_locks_caches_equals_a_clean_build(project: Path, wheel_index,
                                                              images: list[str], tmp_path: Path,
                                                              capsys) -> None:
    started = time.monotonic()
    index_url = wheel_index.url_for("cpu/")
    wheel = f"/cpu/{torch_wheel().name}"
    sqsh = project / "artifacts" / f"{NAME}.sqsh"

    # Another lock's build fills the caches.
    run("lock", NAME, "--index-url", index_url)
    run("build", NAME)
    images.append(built_image())
    epoch = relock_later(project, index_url)

    # On those caches: the torch wheel comes out of the uv cache mount, not from the index.
    fetched = wheel_index.count(wheel)
    run("build", NAME, "--squash", "sqsh")
    assert wheel_index.count(wheel) == fetched, "the warm build did not use the uv cache"
    images.append(built_image())
    warm = shutil.copy(sqsh, tmp_path / "warm.sqsh")

    # Clean: no layer cache, an empty uv cache mount (the wheel is fetched again).
    empty_uv_cache_mount()
    run("build", NAME, "--squash", "sqsh", "--no-cache")
    assert wheel_index.count(wheel) > fetched, "the clean build reused the uv cache"
    images.append(built_image())
    clean = shutil.move(sqsh, tmp_path / "clean.sqsh")

    comparison = compare_squashfs(Path(warm), Path(clean))
    out = capsys.readouterr().out
    seconds = time.monotonic() - started
    print("\n".join(report_lines(comparison)))
    print(f"[cache independence] lock, build, re-lock (epoch {epoch}), build on the caches "
          f"+ squash, clean build + squash, compare: {seconds:.1f} s")
    assert comparison.identical, "\n".join(report_lines(comparison, limit=40)) + out[-3000:]
    Path(warm).unlink()
    Path(clean).unlink()
