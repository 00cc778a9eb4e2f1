"""TransformerEngine's source route built for real: the transformer-engine stage the ROCm
recipes render (ROCm/TransformerEngine at the locked commit with its submodules, one wheel
built without build isolation against the venv's torch, installed by the final stage and
checked there), on the CPU demo recipe's twin, from a source tree of TransformerEngine's
layout and build flow served by the test's git mirror (testbed/transformer_engine_source.py:
CMake builds the common library, torch's cpp_extension the PyTorch extension that links it;
a submodule holds a header the common library needs). The lock takes the tree's commit
through ``--git-mirror``, and setuptools<80 and the wheel's requirements from PyPI.

Not shown here (only with ROCm's hipcc and a GPU): TransformerEngine's own HIP kernels and
their device code; tests/components/transformer_engine/test_device_code.py checks the
device-code reader and the check on libraries hipcc built.
"""

from __future__ import annotations

import json
import subprocess
import time
import tomllib
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from imagebuild.cli import main
from testbed.cpu_recipe import torch_wheel, write_recipe
from testbed.source_mirror import SourceMirror
from testbed.transformer_engine_source import (
    SUBMODULE,
    TE_SOURCE_REF,
    TE_SOURCE_VERSION,
    serve_transformer_engine_source,
)
from tests.support.engine_env import imagebuild_env
from tests.support.indexserver import IndexServer

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

NAME = "cpu-te-source"
IMAGE = f"imagebuild/{NAME}:latest"
DOCKER = "/usr/bin/docker"
SECTION = f"""\
transformer_engine:
  enabled: true
  repository: https://github.com/ROCm/TransformerEngine.git
  ref: {TE_SOURCE_REF}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, registry_base_image: str,
          docker_engine) -> dict:
    index = tmp_path_factory.mktemp("index")
    wheel = torch_wheel()
    (index / wheel.name).symlink_to(wheel)
    project = tmp_path_factory.mktemp("project")
    recipe = write_recipe(project, NAME, registry_base_image)
    recipe.write_text(recipe.read_text() + SECTION)
    with SourceMirror(tmp_path_factory.mktemp("mirror")) as mirror, \
            IndexServer(index) as served, \
            imagebuild_env(project, tmp_path_factory.mktemp("cache")):
        commits = serve_transformer_engine_source(mirror.workdir / "git",
                                                  tmp_path_factory.mktemp("te-tree"))
        mirrors = [f"--git-mirror={source}={target}" for source, target in mirror.mirrors.items()]
        assert main(["lock", NAME, "--index-url", served.url, *mirrors]) == 0
        started = time.monotonic()
        assert main(["build", NAME]) == 0
        print(f"\n[te-source] build {time.monotonic() - started:.0f} s (lock done)")
    lock = tomllib.loads((project / "recipes" / f"pylock.{NAME}.toml").read_text())
    return {"project": project, "lock": lock, **commits}


def run(*command: str) -> subprocess.CompletedProcess[str]:
    """In the image as a squashfs would run it: read-only, no network."""
    result = subprocess.run([DOCKER, "run", "--rm", "--read-only", "--tmpfs", "/tmp",
                             "--network", "none", IMAGE, *command],
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_the_lock_pins_the_commit_and_the_builds_requirements(built: dict) -> None:
    source = built["lock"]["tool"]["imagebuild"]["sources"]["transformer-engine"]
    assert source["ref"] == TE_SOURCE_REF and source["commit"] == built["commit"]
    assert source["repository"].startswith("git://127.0.0.1:")
    packages = {p["name"]: p["version"] for p in built["lock"]["packages"]}
    assert packages["setuptools"] in SpecifierSet("<80")
    assert {"pybind11", "pydantic", "importlib-metadata", "packaging"} <= set(packages)


def test_the_wheel_was_built_against_the_images_torch_and_loads(built: dict) -> None:
    done = run("python", "-c", "import torch, transformer_engine, transformer_engine_torch as te; "
               "print(te.scale(torch.ones(2)).tolist())")
    # 3.0 is the submodule's: the common library was compiled with it checked out.
    assert done.stdout.strip() == "[3.0, 3.0]"


def test_the_manifest_records_the_commit_its_submodules_and_what_was_built(built: dict) -> None:
    engine = json.loads(run("cat", "/opt/imagebuild/manifest.json").stdout)["transformer_engine"]
    assert engine["source"]["commit"] == built["commit"]
    [submodule] = engine["submodules"]
    assert (submodule["path"], submodule["commit"]) == (SUBMODULE, built["submodule"])
    # Fetched from the mirror, beside the repository (its .gitmodules URL is relative).
    assert submodule["url"].startswith("git://127.0.0.1:")
    assert submodule["url"].endswith("/ROCm/te-fixture-scale.git")
    # TransformerEngine's version scheme: VERSION.txt + the checkout's short commit.
    assert engine["version"] == f"{TE_SOURCE_VERSION}+{built['commit'][:8]}"
    files = [Path(f).name for f in engine["built"]["files"]]
    assert "libtransformer_engine.so" in files
    extension = next(f for f in engine["built"]["files"] if "transformer_engine_torch" in f)
    assert any(name.startswith("libc10") for name in engine["built"]["links"][extension])
    assert "libtransformer_engine.so" in engine["built"]["links"][extension]
    sbom = json.loads((built["project"] / "artifacts" / f"{NAME}.cdx.json").read_text())
    components = {c["bom-ref"]: c for c in sbom["components"]}
    assert components["source:transformer-engine"]["version"] == built["commit"]
    # Its submodule, at the commit the locked commit names, in the SBOM too.
    pinned = components[f"source:transformer_engine/{SUBMODULE}"]
    assert pinned["version"] == built["submodule"]
    assert {"name": "imagebuild:submodule-of", "value": "transformer_engine"} in pinned[
        "properties"]
