"""The whole job on this machine, without repo.radeon.com or Docker Hub: a CPU-only recipe
(the same machinery as the ROCm recipes) locked against a local wheel index holding a real
CPU torch wheel, built on a Debian base made with debootstrap, squashed to .sqsh/.sif with
an EDF, and validated inside the image. Prints what each phase took.

Run through scripts/demo (it installs the system packages and imagebuild first).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from imagebuild.cli import main
from testbed.cpu_recipe import demo_project
from testbed.wheel_index import IndexServer


def phase(label: str, argv: list[str]) -> None:
    print(f"\n$ imagebuild {' '.join(argv)}", flush=True)
    started = time.monotonic()
    code = main(argv)
    print(f"[demo] {label}: {time.monotonic() - started:.1f} s, exit {code}", flush=True)
    if code != 0:
        sys.exit(code)


def main_demo() -> None:
    demo = ROOT / "demo"
    started = time.monotonic()
    index = demo_project(demo)
    print(f"[demo] base image, torch wheel and recipe: {time.monotonic() - started:.1f} s")
    os.environ["IMAGEBUILD_PROJECT"] = str(demo)
    if Path("/etc/ssl/certs/ca-certificates.crt").is_file():
        os.environ.setdefault("IMAGEBUILD_SITE_CA", "/etc/ssl/certs/ca-certificates.crt")
    with IndexServer(index) as server:
        phase("lock", ["lock", "cpu-demo", "--index-url", server.url_for("cpu/")])
        phase("show", ["show", "cpu-demo"])
        phase("build + squash", ["build", "cpu-demo", "--squash", "sqsh,sif",
                                 "--site", "cscs-beverin"])
        phase("second build (no-op)", ["build", "cpu-demo", "--squash", "sqsh,sif",
                                       "--site", "cscs-beverin"])
    phase("validate in the image", ["validate", "cpu-demo", "--allow-cpu",
                                    "--report", str(demo / "reports" / "cpu-demo.json")])
    print(f"\n[demo] done in {time.monotonic() - started:.0f} s; artifacts in {demo}/artifacts")


if __name__ == "__main__":
    main_demo()
