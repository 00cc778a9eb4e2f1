"""A source tree with RCCL's build interface, served by the test's git mirror, for the image
build of an RCCL pinned apart from the base image.

The rccl stage (imagebuild/components/rccl/stage.j2) configures a checkout with CMake,
hipcc as the C++ compiler, ``GPU_TARGETS`` (and ``AMDGPU_TARGETS``), ``BUILD_TESTS=OFF`` and
``ROCM_PATH``, builds it and installs ``lib/librccl.so.1`` under its prefix, as ROCm/rccl's
CMakeLists.txt does. This tree has the same interface and a few lines of HIP of its own (not
RCCL's code): a kernel, compiled by hipcc for each GPU target, so the library carries device
code for exactly those, and ``ncclGetVersion`` reporting a version of its own (2.99.0,
``STANDIN_VERSION_CODE``), so a test can tell it from the base image's RCCL by calling it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

#: The repository a test recipe names (served by the mirror under this path) and its ref.
STANDIN_REPOSITORY = "https://github.com/imagebuild-testbed/rccl.git"
STANDIN_REF = "standin-2.99.0"
#: ncclGetVersion's value: major * 10000 + minor * 100 + patch (NCCL_VERSION_CODE's form).
STANDIN_VERSION_CODE = 29900
FILES = {
    "CMakeLists.txt": """\
cmake_minimum_required(VERSION 3.16)
project(rccl VERSION 2.99.0 LANGUAGES CXX)
set(GPU_TARGETS "gfx942" CACHE STRING "GPU targets to build device code for")
option(BUILD_TESTS "Build the tests" OFF)
add_library(rccl SHARED src/collectives.cpp)
target_compile_options(rccl PRIVATE -x hip)
foreach(target IN LISTS GPU_TARGETS)
  target_compile_options(rccl PRIVATE --offload-arch=${target})
  target_link_options(rccl PRIVATE --offload-arch=${target})
endforeach()
set_target_properties(rccl PROPERTIES VERSION 1.0 SOVERSION 1)
install(TARGETS rccl LIBRARY DESTINATION lib)
""",
    "src/collectives.cpp": f"""\
#include <hip/hip_runtime.h>

// One kernel, so the library carries device code for each GPU target it was built for.
__global__ void standinAllReduceSum(float* data, const float* peer, int count) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) data[i] += peer[i];
}}

extern "C" int ncclGetVersion(int* version) {{
  *version = {STANDIN_VERSION_CODE};
  return 0;
}}
""",
}
_ENV = {"GIT_AUTHOR_NAME": "imagebuild testbed", "GIT_AUTHOR_EMAIL": "testbed@invalid",
        "GIT_COMMITTER_NAME": "imagebuild testbed", "GIT_COMMITTER_EMAIL": "testbed@invalid",
        "GIT_AUTHOR_DATE": "2025-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2025-01-01T00:00:00Z"}


def _git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True,
                          text=True, env={**os.environ, **_ENV}).stdout.strip()


def serve_rccl_source(git_root: Path, work: Path) -> str:
    """``<git_root>/imagebuild-testbed/rccl.git``: one commit, tagged ``STANDIN_REF``;
    returns the commit."""
    tree = work / "rccl-standin"
    for name, text in FILES.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    _git(tree, "init", "-q", "-b", "develop")
    _git(tree, "add", "-A")
    _git(tree, "commit", "-q", "-m", "a tree with RCCL's build interface (imagebuild testbed)")
    _git(tree, "tag", STANDIN_REF)
    bare = git_root / "imagebuild-testbed" / "rccl.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(tree), str(bare)], check=True)
    _git(bare, "config", "uploadpack.allowAnySHA1InWant", "true")
    return _git(tree, "rev-parse", "HEAD")
