"""The CPU demo image's bill of materials and size table, on a real Docker engine: the SBOM
beside the artifacts and inside the squashfs lists the lock's wheels with their hashes and
exactly the image's dpkg packages, and validates against the CycloneDX 1.6 schema; the size
table adds up to the image; the final stage carries no compiler, header or package cache.

Builds the same recipe with the same options as test_end_to_end, which runs first in the
suite (its image and artifacts are then reused, and the size table read from the record).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.convert.sbom import IMAGE_SBOM, validation_errors
from imagebuild.convert.sizes import leftovers
from imagebuild.images import latest_tag
from imagebuild.lock.lockfile import read_lock
from tests.support.engine_env import imagebuild_env
from tests.support.squashfs import cat, read_squashfs

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

RECIPE = "cpu-e2e"
IMAGE = latest_tag(RECIPE)
BUILD = ["build", RECIPE, "--squash", "sqsh,sif", "--site", "cscs-beverin"]


@pytest.fixture(scope="module")
def built(project: Path, wheel_index, tmp_path_factory, docker_engine) -> dict:
    with imagebuild_env(project, tmp_path_factory.mktemp("cache")):
        lock = project / "recipes" / f"pylock.{RECIPE}.toml"
        if not lock.is_file():
            assert main(["lock", RECIPE, "--index-url", wheel_index.url_for("cpu/")]) == 0
        yield {"project": project, "artifacts": project / "artifacts",
               "engine": docker_engine, "lock": read_lock(lock)}


@pytest.fixture(scope="module")
def build_output(built: dict) -> str:
    import contextlib
    import io

    # The image may be built already (the end-to-end module shares the project): without
    # its record the artifacts and the size table are made again, as a first build makes them.
    (built["artifacts"] / f"{RECIPE}.build.json").unlink(missing_ok=True)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(BUILD)
    assert code == 0
    print(out.getvalue())
    return out.getvalue()


def test_build_prints_and_records_the_size_table(built: dict, build_output: str) -> None:
    assert "OS packages added" in build_output and "venv" in build_output
    record = json.loads((built["artifacts"] / f"{RECIPE}.build.json").read_text())
    assert record["image_id"] == built["engine"].image_id(IMAGE)
    parts = {p["part"]: p["bytes"] for p in record["sizes"]["parts"]}
    total = record["sizes"]["total_bytes"]
    assert sum(parts.values()) == total
    assert parts["venv"] > 500 << 20  # CPU torch
    # the recipe installs no OS package: the final stage runs no apt (the attribution of a
    # package's files is tested in tests/convert/test_inventory.py)
    assert parts["OS packages added"] == 0
    assert parts["base image"] > 100 << 20
    # no image component: no row of one (each component's parts are its own rows)
    assert list(parts) == ["base image", "OS packages added", "venv", "other"]
    # The engine's own figure (sum of layer sizes) agrees within 1 %: the layers double-count
    # only the few files the final stage rewrites (dpkg's status, ld.so.cache).
    engine_size = built["engine"].inspect(IMAGE)["Size"]
    assert abs(engine_size - total) / engine_size < 0.01, (engine_size, total)
    # and the squashfs holds the same files, plus the runtime files and the SBOM (KB)
    squashed = sum(m.size for m in read_squashfs(built["artifacts"] / f"{RECIPE}.sqsh").values()
                   if m.type == "file")
    assert 0 <= squashed - total < 256 << 10, (squashed, total)


def test_sbom_lists_the_locks_wheels_and_the_images_packages(built: dict, build_output: str
                                                             ) -> None:
    path = built["artifacts"] / f"{RECIPE}.cdx.json"
    text = path.read_text()
    assert validation_errors(text) is None
    sidecar = (built["artifacts"] / f"{RECIPE}.cdx.json.sha256").read_text().split()
    assert sidecar[1] == path.name
    # the same bytes inside the squashfs
    assert cat(built["artifacts"] / f"{RECIPE}.sqsh", IMAGE_SBOM).decode() == text
    bom = json.loads(text)
    components = bom["components"]
    wheels = {c["name"]: c for c in components if c["purl"].startswith("pkg:pypi/")}
    lock = built["lock"]
    assert {w.name: (w.sha256, w.url) for w in lock.wheels} == {
        name: (c["hashes"][0]["content"], c["externalReferences"][0]["url"])
        for name, c in wheels.items()}
    debs = {(c["name"], c["version"]) for c in components if c["purl"].startswith("pkg:deb/")}
    listed = subprocess.run(
        ["/usr/bin/docker", "run", "--rm", "--network", "host", IMAGE, "dpkg-query", "-W",
         "-f", "${db:Status-Status} ${Package} ${Version}\\n"],
        check=True, capture_output=True, text=True).stdout.splitlines()
    installed = {tuple(line.split()[1:3]) for line in listed if line.startswith("installed ")}
    assert debs == installed
    assert {"bash", "dpkg", "python3.11"} <= {name for name, _ in debs}
    assert all("distro=debian-12" in c["purl"] for c in components
               if c["purl"].startswith("pkg:deb/debian/"))
    base = next(c for c in components if c["bom-ref"] == "base-image")
    assert base["version"] == lock.base_digest
    assert f"sbom  {path}" in build_output


def test_final_stage_carries_nothing_the_run_does_not_need(built: dict, build_output: str
                                                           ) -> None:
    paths = [p for p, m in read_squashfs(built["artifacts"] / f"{RECIPE}.sqsh").items()
             if m.type in ("file", "symlink", "hardlink")]
    assert leftovers(paths) == {}
    # the patterns behind it, spelled out
    assert not [p for p in paths if p.startswith("usr/include/") and p.endswith(".h")]
    assert not [p for p in paths if p.startswith("usr/bin/gcc") or p == "usr/bin/cc"]
    assert not [p for p in paths if p.startswith("var/cache/apt/archives/")
                and p.endswith(".deb")]
    assert not [p for p in paths if p.startswith("var/lib/apt/lists/") and "_Packages" in p]
    assert "warning:" not in build_output


def test_a_second_build_reads_the_record(built: dict, build_output: str, capsys) -> None:
    capsys.readouterr()
    assert main(BUILD) == 0
    out = capsys.readouterr().out
    assert "up to date" in out and "OS packages added" not in out  # no table on a no-op
    record = json.loads((built["artifacts"] / f"{RECIPE}.build.json").read_text())
    total = f"sizes: {record['sizes']['total_bytes'] / (1 << 20):.1f} MiB in "
    assert total in out and f"{RECIPE}.build.json" in out


def test_squash_command_writes_the_same_sbom(built: dict, build_output: str, tmp_path: Path,
                                             capsys) -> None:
    capsys.readouterr()
    assert main(["squash", RECIPE, "--formats", "sqsh", "--output-dir", str(tmp_path)]) == 0
    assert "OS packages added" in capsys.readouterr().out
    text = (built["artifacts"] / f"{RECIPE}.cdx.json").read_text()
    assert (tmp_path / f"{RECIPE}.cdx.json").read_text() == text
    assert cat(tmp_path / f"{RECIPE}.sqsh", IMAGE_SBOM).decode() == text
