"""The CPU-only recipe that exercises the same machinery as the ROCm recipes, and the real
CPU torch wheel its index serves (the demo and the end-to-end tests share both)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from testbed.base_images import cache_dir

#: A CPU build small enough for CI (about 190 MB) that still runs a real training step.
TORCH_VERSION = "2.13.0"
RECIPE = """\
version: 1
description: CPU-only image for the end-to-end test (same machinery as the ROCm recipes)
rocm: null
base_image: {base_image}
python: "3.11"
wheels:
  # replaced at lock time by --index-url (the test index listens on a random port)
  index_url: http://127.0.0.1:9/unused/
  packages:
    torch: {torch}
dockerfile:
  # the engine's built-in frontend: docker/dockerfile images cannot be pulled here
  syntax: null
env:
  IMAGEBUILD_E2E: "yes $HOME stays literal"
labels:
  org.example.purpose: end-to-end-test
"""


#: The Swiss AI Megatron-LM bundle's ``main`` and its first parent
#: (../shared/fixtures/sources/README.md): two pins of the same repository.
MEGATRON_MAIN = "81d44dbe25c22190989fa8a12284bdb8d1303b40"
MEGATRON_PARENT = "e182fea25131b81981bc102a0a7420bde9f9f391"
MEGATRON_SECTION = """\
megatron:
  enabled: true
  repository: https://github.com/swiss-ai/Megatron-LM.git
  ref: {ref}
  pypi: [numpy, einops, six, regex, sentencepiece, tiktoken, pyyaml, packaging, pybind11]
"""


def torch_wheel() -> Path:
    """A real CPU torch wheel for Python 3.11, downloaded once into the test cache."""
    directory = cache_dir() / "wheels"
    found = sorted(directory.glob(f"torch-{TORCH_VERSION}*-cp311-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                        "--only-binary", ":all:", "--python-version", "3.11",
                        "--platform", "manylinux_2_28_x86_64", "-d", str(directory),
                        f"torch=={TORCH_VERSION}"], check=True)
        found = sorted(directory.glob(f"torch-{TORCH_VERSION}*-cp311-*.whl"))
    assert found, f"pip download gave no torch {TORCH_VERSION} cp311 wheel in {directory}"
    return found[-1]


def write_recipe(project: Path, name: str, base_image: str) -> Path:
    """``project/recipes/<name>.yaml``: the CPU recipe on ``base_image`` with the torch wheel
    the testbed provides (demo, tests and benchmarks build the same recipe)."""
    path = project / "recipes" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(RECIPE.format(base_image=base_image, torch=torch_wheel().name.split("-")[1]))
    return path


#: The demo's recipe name and the image tag a build of it gets (imagebuild.images).
DEMO_RECIPE = "cpu-demo"
DEMO_IMAGE = f"imagebuild/{DEMO_RECIPE}:latest"


def demo_project(project: Path) -> Path:
    """A project directory holding the demo recipe, built on the debootstrapped base in the
    loopback registry, and its wheel index directory (served by ``IndexServer``) holding
    the real CPU torch wheel; returns that index directory. scripts/demo and the squash
    benchmark start from it."""
    from imagebuild.engine.select import open_engine
    from testbed import base_images

    engine = open_engine("docker")
    base_images.import_base_image_docker(engine)  # type: ignore[arg-type]
    base = base_images.push_base_image(engine)  # type: ignore[arg-type]
    wheel = torch_wheel()
    index = project / "index"
    (index / "cpu").mkdir(parents=True, exist_ok=True)
    (project / "recipes").mkdir(parents=True, exist_ok=True)
    if not (index / "cpu" / wheel.name).exists():
        try:
            os.link(wheel, index / "cpu" / wheel.name)
        except OSError:  # another filesystem
            shutil.copy2(wheel, index / "cpu" / wheel.name)
    write_recipe(project, DEMO_RECIPE, base)
    return index
