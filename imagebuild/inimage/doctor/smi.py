"""smi: one SMI library, one backend, in the training process.

Known failures: torch sees zero GPUs when a second amd_smi library is loaded beside the
one it uses (https://github.com/pytorch/pytorch/issues/186516); a network plugin whose
hwloc was built with a different SMI backend (rocm_smi) than RCCL's (amd_smi) double
frees at exit (HPE's advice: build hwloc without RSMI, https://github.com/HewlettPackard/shs-ccl-docs).
Read from the image's files, no GPU needed: the libraries torch, RCCL and the plugin
load (DT_NEEDED, resolved as the loader does), and which SMI files they reach.
"""

from __future__ import annotations

import glob
from pathlib import Path

from .finding import Finding, failed, passed, skipped, warned
from .libraries import Loader, resolve
from .needs import ImageNeeds

ITEM = "smi"
BACKENDS = {"libamd_smi.so": "amd_smi", "librocm_smi64.so": "rocm_smi"}


def backend(name: str) -> str | None:
    return next((b for prefix, b in BACKENDS.items() if name.startswith(prefix)), None)


def starting_points(root: Path, needs: ImageNeeds, loader: Loader) -> dict[str, str]:
    """What the training process loads first: torch's HIP library, RCCL, the plugin."""
    found: dict[str, str] = {}
    if needs.venv:
        for path in sorted(glob.glob(str(root / needs.venv.lstrip("/") / "lib/python*"
                                         / "site-packages/torch/lib/libtorch_hip.so"))):
            found["torch"] = "/" + str(Path(path).relative_to(root))
    rccl = loader.find("librccl.so.1") or loader.find("librccl.so")
    if rccl:
        found["RCCL"] = rccl
    if needs.plugin_library and loader.exists(needs.plugin_library):
        found["plugin"] = needs.plugin_library
    return found


def check(root: Path, needs: ImageNeeds, env: dict[str, str]) -> Finding:
    if not needs.rocm:
        return skipped(ITEM, "CPU-only image")
    loader = Loader(root, env.get("LD_LIBRARY_PATH", "").split(":"))
    starts = starting_points(root, needs, loader)
    if not starts:
        return warned(ITEM, "found neither torch's HIP library, RCCL nor the plugin here",
                      "run the in-image part: imagebuild doctor IMAGE, or "
                      "python -m imagebuild_checks doctor inside the image")
    reached: dict[str, set[str]] = {}  # real file -> who loads it
    for who, start in starts.items():
        for name, path in loader.closure(start).items():
            if path and backend(name):
                reached.setdefault(resolve(root, path), set()).add(who)
    by_backend: dict[str, list[str]] = {}
    for path in reached:
        by_backend.setdefault(backend(Path(path).name) or "?", []).append(path)
    described = "; ".join(f"{path} ({', '.join(sorted(reached[path]))})" for path in sorted(reached))
    if len(by_backend) > 1:
        return failed(ITEM, f"two SMI backends in one process: {described}", "rebuild the "
                      "plugin's hwloc without RSMI (--disable-rsmi), or link it with the SMI "
                      "library RCCL uses")
    copies = [paths for paths in by_backend.values() if len(paths) > 1]
    if copies:
        return failed(ITEM, f"two copies of one SMI library: {described}; torch then sees "
                      "zero GPUs", "keep one copy: drop the second from the library path or "
                      "the wheel's lib directory")
    if not reached:
        return passed(ITEM, f"no SMI library reached from {', '.join(starts)}")
    return passed(ITEM, f"one SMI library: {described}")
