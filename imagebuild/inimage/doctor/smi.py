"""smi: one copy of each SMI library in the training process.

Known failures: torch.cuda.device_count() is 0 when the amdsmi Python package loads its
own libamd_smi (ctypes, by path) beside the one torch's libraries linked
(https://github.com/pytorch/pytorch/issues/186516); a network plugin whose hwloc links
another rocm_smi than RCCL's crashes at exit with a double free (HPE's advice: build
hwloc without RSMI, https://github.com/HewlettPackard/shs-ccl-docs). Read from the
image's files, no GPU needed: the libraries torch, RCCL and the plugin load, resolved as
the dynamic loader does in one process (a name already loaded is not loaded again), and
the libraries the amdsmi package opens by path.
"""

from __future__ import annotations

import glob
from pathlib import Path

from .finding import Finding, failed, passed, skipped, warned
from .libraries import Loader, resolve
from .needs import ImageNeeds

ITEM = "smi"
FAMILIES = {"libamd_smi.so": "amd_smi", "librocm_smi64.so": "rocm_smi"}


def family(name: str) -> str | None:
    return next((f for prefix, f in FAMILIES.items() if name.startswith(prefix)), None)


def _site_packages(root: Path, venv: str | None) -> list[Path]:
    if not venv:
        return []
    return [Path(p) for p in sorted(glob.glob(str(root / venv.lstrip("/") / "lib/python*"
                                                   / "site-packages")))]


def starting_points(root: Path, needs: ImageNeeds, loader: Loader) -> list[tuple[str, str]]:
    """What the training process loads, in order: torch's HIP library, RCCL, the plugin."""
    found: list[tuple[str, str]] = []
    for site in _site_packages(root, needs.venv):
        torch_hip = site / "torch/lib/libtorch_hip.so"
        if torch_hip.is_file():
            found.append(("torch", "/" + str(torch_hip.relative_to(root))))
    rccl = loader.find("librccl.so.1") or loader.find("librccl.so")
    if rccl:
        found.append(("RCCL", rccl))
    if needs.plugin_library and loader.exists(needs.plugin_library):
        found.append(("plugin", needs.plugin_library))
    return found


def loaded_in_process(loader: Loader, starts: list[tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """library name -> (path in root, who loaded it first), one process's worth."""
    loaded: dict[str, tuple[str, str]] = {}
    for who, start in starts:
        queue = [start]
        while queue:
            current = queue.pop(0)
            info = loader.info(current)
            for name in info.needed if info else ():
                if name in loaded:
                    continue
                path = loader.find(name, current)
                if path:
                    loaded[name] = (path, who)
                    queue.append(path)
    return loaded


def check(root: Path, needs: ImageNeeds, env: dict[str, str]) -> Finding:
    if not needs.rocm:
        return skipped(ITEM, "CPU-only image")
    loader = Loader(root, env.get("LD_LIBRARY_PATH", "").split(":"))
    starts = starting_points(root, needs, loader)
    if not starts:
        return warned(ITEM, "found neither torch's HIP library, RCCL nor the plugin here",
                      "run the in-image part: imagebuild doctor IMAGE, or "
                      "python -m imagebuild_checks doctor inside the image")
    files: dict[str, set[str]] = {}  # real file -> who loads it
    for name, (path, who) in loaded_in_process(loader, starts).items():
        if family(name):
            files.setdefault(resolve(root, path), set()).add(who)
    for site in _site_packages(root, needs.venv):
        for library in sorted((site / "amdsmi").glob("**/libamd_smi.so*")):
            path = resolve(root, "/" + str(library.relative_to(root)))
            files.setdefault(path, set()).add("amdsmi package, by path")
    groups: dict[str, list[str]] = {}
    for path in sorted(files):
        groups.setdefault(family(Path(path).name) or "?", []).append(path)
    described = "; ".join(f"{path} ({', '.join(sorted(files[path]))})" for path in sorted(files))
    doubled = [name for name, paths in groups.items() if len(paths) > 1]
    if doubled:
        fixes = {"amd_smi": "remove the amdsmi package from the venv (torch uses ROCm's "
                            "libamd_smi)",
                 "rocm_smi": "build the plugin's hwloc without RSMI (--disable-rsmi) or "
                             "against the image's ROCm"}
        return failed(ITEM, f"two copies of {' and '.join(doubled)} in one process: {described}",
                      "; ".join(fixes.get(name, "keep one copy") for name in doubled))
    if not files:
        return passed(ITEM, f"no SMI library reached from {', '.join(w for w, _ in starts)}")
    return passed(ITEM, f"one copy of each SMI library: {described}")
