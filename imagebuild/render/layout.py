"""Where imagebuild's own things live inside an image, and the pinned inputs that are not
recipe values. (Each component keeps its own paths in its folder, imagebuild.components.)

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

#: Environment variables the final stage sets itself; a recipe may not override them.
RESERVED_ENV = grammar.RESERVED_ENV
#: Label prefix imagebuild owns.
LABEL_NAMESPACE = "imagebuild."

VENV = "/opt/venv"
SITE_CA = "/run/secrets/site-ca"

#: The ROCm selector sdist as a hashed requirement, for the python stage (ROCm from wheels).
SELECTOR_FILE = "selector.txt"
#: The scripts the build runs that are not a component's: uv's fetcher (python stage) and
#: the final stage's device-code diet of packaged-ROCm images.
SCRIPTS = Path(__file__).resolve().parent / "scripts"
FETCH_UV = "fetch-uv.py"
#: What every build-time script imports, staged beside each (imagebuild.render.context).
SCRIPT_HELPERS = SCRIPTS / "buildtime.py"
#: The final stage's device-code diet of packaged-ROCm images, and what it writes.
DEVICE_CODE_CHECK = "device-code-check.py"
DEVICE_CODE_REPORT = "/opt/imagebuild/device-code.json"
#: Where the packaged ROCm keeps kernels named by architecture, relative to rocm_prefix
#: (rocBLAS, hipBLASLt: <libdir>/<library>/library; MIOpen: share/miopen/db), and the same
#: in a torch wheel that bundles its own libraries (torch/lib).
ROCM_KERNEL_DIRS = ("lib/rocblas/library", "lib/hipblaslt/library", "share/miopen/db")
TORCH_KERNEL_DIRS = ("rocblas/library", "hipblaslt/library")
