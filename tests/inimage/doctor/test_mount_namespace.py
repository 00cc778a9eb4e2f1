"""rocm-binds in a real mount namespace (unshare -m): a host ROCm directory bind-mounted
over an image tree's /opt/rocm/lib is seen in the kernel's own /proc/self/mountinfo, as
apptainer --rocm or a vendor hook would leave it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import imagebuild

pytestmark = pytest.mark.integration

PROBE = """
import json, sys
from imagebuild.inimage.doctor.node import Node
from imagebuild.inimage.doctor.rocm_binds import check_mounts
print(json.dumps(check_mounts(Node("/"), image_root=sys.argv[1]).to_json()))
"""


def run_in_namespace(image: Path, bind: Path | None) -> dict[str, str]:
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) (util-linux) for a private mount namespace")
    mount = f"mount --bind {bind} {image}/opt/rocm/lib && " if bind else ""
    script = f'{mount}exec "$0" -c "$1" "$2"'
    result = subprocess.run([unshare, "-m", "--propagation", "private", "sh", "-c", script,
                             sys.executable, PROBE, str(image)], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(imagebuild.__file__).parents[1])}, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_bind_over_the_images_rocm_fails(tmp_path: Path) -> None:
    image, host = tmp_path / "image", tmp_path / "host" / "rocm-6.2.2" / "lib"
    (image / "opt/rocm/lib").mkdir(parents=True)
    host.mkdir(parents=True)
    finding = run_in_namespace(image, host)
    assert finding["status"] == "fail"
    assert finding["reason"].startswith("/opt/rocm/lib is a mount of ")
    assert str(host) in finding["reason"]


def test_no_bind_passes(tmp_path: Path) -> None:
    image = tmp_path / "image"
    (image / "opt/rocm/lib").mkdir(parents=True)
    assert run_in_namespace(image, None)["status"] == "pass"
