"""Two clean builds of the CPU demo recipe squash to the same bytes.

`imagebuild build RECIPE --squash sqsh,sif --no-cache --check-reproducible` builds the image
without build cache and squashes it, then builds it again without cache into a second tag,
squashes both images and compares the .sqsh (member by member when they differ) and the
.sif. The recipe has its own name so that its tags never meet the end-to-end test's.
"""

from __future__ import annotations

import time

import pytest

from imagebuild.cli import main
from imagebuild.files import sha256_file
from imagebuild.images import BUILD_HASH_LABEL, image_repository, latest_tag
from imagebuild.lock.epoch import EPOCH_LABEL
from imagebuild.recipe.model import short_hash
from testbed.cpu_recipe import write_recipe
from tests.support.engine_env import imagebuild_env

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

NAME = "cpu-repro"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, registry_base_image: str, wheel_index,
        docker_engine) -> dict:
    root = tmp_path_factory.mktemp("repro")
    write_recipe(root, NAME, registry_base_image)
    with imagebuild_env(root, tmp_path_factory.mktemp("cache"), unset=("SOURCE_DATE_EPOCH",)):
        assert main(["lock", NAME, "--index-url", wheel_index.url_for("cpu/")]) == 0
        yield {"project": root, "engine": docker_engine}


def test_two_clean_builds_give_the_same_squashfs_and_sif(env: dict, capsys) -> None:
    started = time.monotonic()
    code = main(["build", NAME, "--squash", "sqsh,sif", "--no-cache", "--check-reproducible"])
    seconds = time.monotonic() - started
    out, err = capsys.readouterr()
    print(out)
    print(f"[reproducible] build + squash, rebuild without cache + squash both, compare: "
          f"{seconds:.1f} s")
    assert code == 0, out + err[-3000:]
    lines = out.splitlines()
    assert any(line.startswith("reproducible: first.sqsh and second.sqsh are identical")
               for line in lines), out
    assert any(line.startswith("reproducible: first.sif and second.sif are identical")
               for line in lines), out
    # The pipeline's own artifact of the first image is those very bytes too.
    sqsh = env["project"] / "artifacts" / f"{NAME}.sqsh"
    identical = next(line for line in lines if line.startswith("reproducible: first.sqsh"))
    assert identical.endswith(f"(sha256:{sha256_file(sqsh)})")
    labels = env["engine"].image_labels(latest_tag(NAME))
    assert labels[EPOCH_LABEL].isdigit()
    # The second image's tag is removed once the check passed; the first one stays.
    build_hash = labels[BUILD_HASH_LABEL]
    assert not env["engine"].image_exists(
        f"{image_repository(NAME)}:{short_hash(build_hash)}-recheck")
