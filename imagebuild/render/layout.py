"""Where things live inside an image, and the pinned inputs that are not recipe values.

Change a path here and every stage, the manifest, the EDF and the in-image checks follow.
"""

from __future__ import annotations

from pathlib import Path

from imagebuild.recipe import grammar

#: The in-image package (checks, tuning, model; standard library + torch only): copied from
#: this source directory into the image under IMAGE_CHECKS_DIR/CHECKS_IMPORT_NAME.
CHECKS_SOURCE = Path(__file__).resolve().parents[1] / "inimage"
CHECKS_IMPORT_NAME = "imagebuild_checks"
#: Everything imagebuild puts into an image that is not a build output lives here.
IMAGE_ROOT = "/opt/imagebuild"
IMAGE_CHECKS_DIR = f"{IMAGE_ROOT}/checks"
IMAGE_MANIFEST = f"{IMAGE_ROOT}/manifest.json"
#: The network plugin stage's measurements (ELF symbol versions, RUNPATH), merged into the
#: manifest by the final stage.
PLUGIN_RECORD = f"{IMAGE_ROOT}/network-plugin.json"
#: `imagebuild` inside the image: the checks with the image's own Python, so
#: `imagebuild validate ...` works in the image with only torch installed.
SHIM_PATH = "/usr/local/bin/imagebuild"
SHIM_COMMAND = (f'PYTHONPATH="{IMAGE_CHECKS_DIR}${{PYTHONPATH:+:$PYTHONPATH}}" '
                f'exec /opt/venv/bin/python -m {CHECKS_IMPORT_NAME} "$@"')

#: uv installs the venv from the lock (PEP 751 pylock.toml, hashes verified). It comes from
#: its PyPI wheel, pinned here by URL and sha256 per architecture (PyPI JSON API, uv 0.13.9);
#: the same version as the uv that writes the locks (pyproject: uv>=0.8).
UV_VERSION = "0.13.9"
UV_WHEELS: tuple[tuple[str, str, str], ...] = (
    ("x86_64",
     ("https://files.pythonhosted.org/packages/3d/aa/26d64642d808de4a652579ef950d7cd2d37f080a8babf9"
      "c67c6b75fc4c3f/uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"),
     "d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19"),
    ("aarch64",
     ("https://files.pythonhosted.org/packages/57/15/94b6cd62ac3ff6550288328e8035288875197cbc183f51"
      "554b266a69877b/uv-0.13.9-py3-none-manylinux_2_17_aarch64.manylinux2014_aarch64.musllinux_1_1"
      "_aarch64.whl"),
     "5435c5ce14a56431208ca0996416d310f1598e8c2c8ba707688985a16bb82dbe"),
)

#: Shared libraries the plugin links besides libfabric (aws-ofi-nccl requires hwloc).
PLUGIN_RUNTIME_PACKAGES = ("libhwloc15",)
#: Runtime libraries of hipBLASLt's clients (gfortran, and the system LAPACK/BLAS their CPU
#: reference links: the build packages' liblapack-dev/libblas-dev replace what install.sh -d
#: would build into /usr/local).
HIPBLASLT_CLIENT_RUNTIME_PACKAGES = ("libgfortran5", "liblapack3", "libblas3")

#: Environment variables the final stage sets itself; a recipe may not override them.
RESERVED_ENV = grammar.RESERVED_ENV
#: Label prefix imagebuild owns.
LABEL_NAMESPACE = "imagebuild."

VENV = "/opt/venv"
#: Megatron-LM's checkout in the image (the ReFrame check's MEGATRON_LM_DIR).
MEGATRON_PREFIX = "/opt/megatron-lm"
#: What the Megatron, TransformerEngine and rccl-tests stages need beyond the recipe's
#: build_packages: git fetches the sources (rccl-tests also names the revision in its
#: binaries), make and g++ build them (Megatron's dataset helpers are a pybind11 extension
#: built by megatron/core/datasets/Makefile; hipcc's clang compiles rccl-tests' host code
#: against the C++ standard library g++ brings).
SOURCE_BUILD_PACKAGES = ("g++", "make", "git", "ca-certificates")
#: At run time Megatron's rank 0 runs that Makefile again (megatron.core.datasets.utils.
#: compile_helpers): make, and python3-config for the extension suffix, must be there for
#: it to find the built helpers up to date instead of failing to compile them.
MEGATRON_RUNTIME_PACKAGES = ("make",)
HIPBLASLT_PREFIX = "/opt/hipblaslt"
#: rccl-tests' install tree; its benchmarks are in bin/.
RCCL_TESTS_PREFIX = "/opt/rccl-tests"
#: The benchmarks rccl-tests' src/Makefile builds (BIN_FILES_LIST), each as <name>_perf.
RCCL_TESTS_COLLECTIVES = ("all_reduce", "all_gather", "broadcast", "reduce_scatter", "reduce",
                          "alltoall", "scatter", "gather", "sendrecv", "alltoallv")
#: The tuner plugin's install tree: lib/ the plugin, bin/ its probe, the check's record.
RCCL_TUNER_PREFIX = "/opt/rccl-tuner"
#: What the tuner stage needs beyond the recipe's build_packages: curl fetches the archive,
#: gcc compiles the plugin and the probe (plain C), readelf and python3 run its check.
RCCL_TUNER_BUILD_PACKAGES = ("gcc", "libc6-dev", "curl", "ca-certificates", "binutils",
                             "python3")
LIBFABRIC_PREFIX = "/opt/libfabric"
SITE_CA = "/run/secrets/site-ca"

#: The ROCm selector sdist as a hashed requirement, for the python stage (ROCm from wheels).
SELECTOR_FILE = "selector.txt"
