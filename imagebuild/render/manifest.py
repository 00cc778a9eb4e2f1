"""What /opt/imagebuild/manifest.json records: the recipe, every pinned version and commit,
and each component's part (its plan's ``manifest``).

Keys read by the in-image checks (imagebuild/inimage/image_manifest.py): recipe, input_hash,
rocm_version, python_version, wheels, gpu_targets, hipblaslt{enabled, commit, bench},
network_plugin{enabled, kind, library}. The final stage's checks add what they found to
their components' parts. No timestamps: the same inputs give the same bytes (and the same
layer).
"""

from __future__ import annotations

from typing import Any

from imagebuild import __version__, components
from imagebuild.errors import LockError, short_path
from imagebuild.render.layout import UV_VERSION, UV_WHEELS, VENV
from imagebuild.render.plan import BuildPlan


def manifest(plan: BuildPlan) -> dict[str, Any]:
    """The manifest of a locked plan: the image's own keys, then each component's part in
    the registry's order (a component of the first recipe format says it is off)."""
    recipe, lock = plan.recipe, plan.lock
    if lock is None:
        raise LockError(f"{recipe.name}: not locked; a manifest records locked pins only")
    data: dict[str, Any] = {
        "schema": 1,
        "generator": f"imagebuild {__version__}",
        "recipe": recipe.name,
        "input_hash": recipe.input_hash(),
        "lock": {"file": short_path(lock.path), "sha256": lock.file_hash(),
                 "input_hash": lock.input_hash},
        "rocm_version": recipe.rocm,
        "python_version": recipe.python,
        "base_image": {"reference": recipe.base_image, "digest": lock.base_digest,
                       "pinned": lock.base_image_pinned},
        "gpu_targets": list(recipe.gpu_targets),
        "venv": VENV,
        "wheels": {w.name: w.version for w in lock.wheels},
        "wheel_files": [{"name": w.name, "version": w.version, "url": w.url,
                         "sha256": w.sha256, "size": w.size} for w in lock.wheels],
        "tools": {"uv": {"version": UV_VERSION, "path": "/usr/local/bin/uv",
                         "wheels": {arch: {"url": url, "sha256": sha}
                                    for arch, url, sha in UV_WHEELS}}},
        "rocm_from": recipe.rocm_from,
    }
    if lock.selector is not None:
        data["rocm_wheels"] = {
            "gpu_family": recipe.gpu_family, "index": recipe.wheels.index_url,
            **({"device_extras": list(recipe.device_extras)} if recipe.multi_arch else {}),
            "selector": {"name": lock.selector.name, "version": lock.selector.version,
                         "url": lock.selector.url, "sha256": lock.selector.sha256}}
    for component in components.registered():
        part = plan.parts.get(component.name)
        if part is not None:
            data[component.name] = dict(part.manifest)
        elif component.always_recorded:
            data[component.name] = {"enabled": False}
    return data
