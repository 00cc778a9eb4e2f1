"""A plan -> the build context: the Dockerfile and every file it COPYs (the wheels-only lock,
the manifest, the in-image checks and the ``imagebuild`` shim), staged in a directory."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from imagebuild import __version__
from imagebuild.errors import LockError, RenderError
from imagebuild.lock.check import display
from imagebuild.lock.model import Lock
from imagebuild.render.dockerfile import TEMPLATES, render_dockerfile
from imagebuild.render.layout import (
    CHECKS_IMPORT_NAME,
    CHECKS_SOURCE,
    DEVICE_CODE_CHECK,
    HIPBLASLT_PREFIX,
    LIBFABRIC_PREFIX,
    SELECTOR_FILE,
    SHIM_COMMAND,
    UV_VERSION,
    UV_WHEELS,
    VENV,
)
from imagebuild.render.plan import (
    TUNER_CONFIG_CONTEXT,
    BuildPlan,
    device_code_diet,
    plugin_prefix,
)

#: File in a staged context directory that marks it as ours (safe to clear and restage).
CONTEXT_MARKER = ".imagebuild-context"


@dataclass(frozen=True)
class BuildContext:
    """A staged build context: the Dockerfile and every file it COPYs or mounts."""

    directory: Path
    dockerfile: Path
    #: Context-relative paths of the staged files, sorted.
    files: tuple[str, ...]


def build_context(plan: BuildPlan, dest_dir: Path, checks_source: Path | None = None, *,
                  dockerfile: str | None = None) -> BuildContext:
    """Stage the Dockerfile and everything it uses from its context into ``dest_dir``.

    ``dockerfile``: the plan's Dockerfile when the caller rendered it already (a build
    renders it once, for dockerfiles/ and every context it stages). Refuses an unlocked
    recipe: the build installs only what a lock pins. ``dest_dir`` must be missing, empty,
    or a context staged here before (it is then cleared).
    """
    recipe, lock = plan.recipe, plan.lock
    if lock is None:
        raise LockError(f"{recipe.name}: not locked; run `imagebuild lock {recipe.name}` "
                        "first (an image installs only what its lock pins)")
    if dockerfile is None:
        dockerfile = render_dockerfile(plan)
    checks = checks_source or CHECKS_SOURCE
    if not (checks / "__main__.py").is_file():
        raise RenderError(f"in-image checks not found: {checks}/__main__.py (the image "
                          "carries them so `imagebuild validate` runs inside it)")
    _prepare_directory(dest_dir)
    (dest_dir / CONTEXT_MARKER).write_text(f"imagebuild {__version__} {recipe.name}\n")
    files: dict[str, str] = {
        "Dockerfile": dockerfile,
        "pylock.toml": python_lock(lock),
        "manifest.json": json.dumps(manifest(plan), indent=2) + "\n",
        "fetch-uv.py": (TEMPLATES / "fetch-uv.py").read_text(),
        "bin/imagebuild": _shim(),
    }
    if lock.selector is not None:
        files[SELECTOR_FILE] = selector_requirement(lock)
    if device_code_diet(recipe):
        files[DEVICE_CODE_CHECK] = (TEMPLATES / DEVICE_CODE_CHECK).read_text()
    if plan.plugin is not None:
        files["network-plugin-check.py"] = (TEMPLATES / "network-plugin-check.py").read_text()
    if plan.hipblaslt is not None:
        files["hipblaslt-tuning-kit.sh"] = (TEMPLATES / "hipblaslt-tuning-kit.sh").read_text()
        files[plan.hipblaslt.check] = (TEMPLATES / plan.hipblaslt.check).read_text()
        if plan.hipblaslt.clients:
            files[plan.hipblaslt.cblas_config] = \
                (TEMPLATES / plan.hipblaslt.cblas_config).read_text()
    # Each stage's build-time check script, bind-mounted into the step that runs it.
    for stage in (plan.megatron, plan.rccl_tests, plan.transformer_engine):
        if stage is not None:
            files[stage.check] = (TEMPLATES / stage.check).read_text()
    if plan.rccl_tuner is not None:
        for name in plan.rccl_tuner.sources:
            files[name] = (TEMPLATES / name).read_text()
        if plan.rccl_tuner.config_source is not None:
            files[TUNER_CONFIG_CONTEXT] = plan.rccl_tuner.config_source.read_text()
    for name, text in files.items():
        path = dest_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        path.chmod(0o755 if name.startswith("bin/") else 0o644)
    copy_checks(dest_dir / "checks", checks)
    if lock.source_date_epoch is not None:
        _date(dest_dir, lock.source_date_epoch)
    staged = sorted(str(p.relative_to(dest_dir)) for p in dest_dir.rglob("*")
                    if p.is_file() and p.name != CONTEXT_MARKER)
    return BuildContext(dest_dir, dest_dir / "Dockerfile", tuple(staged))


def copy_checks(directory: Path, source: Path = CHECKS_SOURCE) -> Path:
    """The in-image package as images carry it: ``directory/CHECKS_IMPORT_NAME``, replaced if
    there, without bytecode, readable by any container user (modes from the checkout's umask
    would otherwise leak into the layer and its cache key). Returns the package directory."""
    target = directory / CHECKS_IMPORT_NAME
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


def _date(directory: Path, epoch: int) -> None:
    """Give everything staged the lock's epoch: COPY keeps a context file's mtime, and the
    checks' copies would otherwise carry the checkout's times (older than the epoch, so the
    squash's clamp keeps them) and differ between two checkouts of the same commit; nor does
    BuildKit's cache key of a COPY include mtimes, so a layer from another checkout would
    bring that checkout's times along."""
    for path in [*directory.rglob("*"), directory]:
        os.utime(path, (epoch, epoch), follow_symlinks=False)


def _prepare_directory(directory: Path) -> None:
    """Make ``directory`` an empty context; only ever clears one staged here before."""
    if directory.exists():
        if not directory.is_dir():
            raise RenderError(f"{directory}: exists and is not a directory")
        entries = list(directory.iterdir())
        if entries and not (directory / CONTEXT_MARKER).is_file():
            raise RenderError(f"{directory}: not empty and not a build context staged by "
                              "imagebuild; refusing to clear it")
        for entry in entries:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    directory.mkdir(parents=True, exist_ok=True)


def selector_requirement(lock: Lock) -> str:
    """``rocm @ <url> --hash=sha256:<hex>``: the sdist's exact bytes, nothing resolved."""
    assert lock.selector is not None
    return (f"{lock.selector.name} @ {lock.selector.url} "
            f"--hash=sha256:{lock.selector.sha256}\n")


def python_lock(lock: Lock) -> str:
    """The Python part of the lock as a standalone PEP 751 file for the python stage.

    Only wheels: a change to a git commit or the base digest leaves this file, and so the
    python stage's cache, untouched.
    """
    packages = []
    for wheel in lock.wheels:
        entry: dict[str, Any] = {"url": wheel.url, "hashes": {"sha256": wheel.sha256}}
        if wheel.size is not None:
            entry["size"] = wheel.size
        packages.append({"name": wheel.name, "version": wheel.version, "wheels": [entry]})
    document = {
        "lock-version": "1.0",
        "created-by": "imagebuild",
        "requires-python": f"=={lock.python}.*",
        "packages": packages,
    }
    return (f"# The wheels of {display(lock.path)}, staged by imagebuild for the python "
            "stage.\n" + tomli_w.dumps(document))


def manifest(plan: BuildPlan) -> dict[str, Any]:
    """What /opt/imagebuild/manifest.json records: every pinned version and commit.

    Keys read by the in-image checks (imagebuild/inimage/image_manifest.py): recipe,
    input_hash, rocm_version, python_version, wheels, gpu_targets, hipblaslt{enabled,
    commit, bench}, network_plugin{enabled, kind, library}. No timestamps: the same inputs
    give the same bytes (and the same layer).
    """
    recipe, lock = plan.recipe, plan.lock
    if lock is None:
        raise LockError(f"{recipe.name}: not locked; a manifest records locked pins only")
    plugin: Any = recipe.components["network_plugin"]
    hip: Any = recipe.components["hipblaslt"]

    def on(name: str) -> bool:
        section = recipe.components.get(name)
        return section is not None and section.enabled
    data: dict[str, Any] = {
        "schema": 1,
        "generator": f"imagebuild {__version__}",
        "recipe": recipe.name,
        "input_hash": recipe.input_hash(),
        "lock": {"file": display(lock.path), "sha256": lock.file_hash(),
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
        "hipblaslt": {"enabled": hip.enabled},
        "network_plugin": {"enabled": plugin.enabled},
        "megatron": {"enabled": on("megatron")},
        "transformer_engine": {"enabled": on("transformer_engine")},
        "rccl_tests": {"enabled": on("rccl_tests")},
        **({"rccl_tuner": {"enabled": True}} if on("rccl_tuner") else {}),
        "rocm_from": recipe.rocm_from,
    }
    engine = plan.transformer_engine
    if engine is not None:
        # "torch_extension" (the built files and what they link) is added by the final
        # stage's check.
        data["transformer_engine"].update({
            "version": engine.version, "gpu_targets": engine.targets.split(";") if engine.targets
            else [], "torch_extension_source": {"url": engine.sdist_url,
                                                "sha256": engine.sdist_sha256}})
    megatron = lock.git("megatron")
    if plan.megatron is not None and megatron:
        # "dir", "version" and "dataset_helpers" are added by the final stage's check.
        data["megatron"].update({
            "repository": megatron.repository, "ref": megatron.ref,
            "commit": megatron.commit, "pretrain_gpt": f"{plan.megatron.prefix}/pretrain_gpt.py",
        })
    tests_git = lock.git("rccl-tests")
    if plan.rccl_tests is not None and tests_git:
        tests = plan.rccl_tests
        data["rccl_tests"].update({
            "repository": tests_git.repository, "ref": tests_git.ref,
            "commit": tests_git.commit, "gpu_targets": list(tests.targets),
            "bin": tests.bin_dir, "binaries": [f"{tests.bin_dir}/{name}" for name in tests.binaries],
        })
    if plan.rccl_tuner is not None:
        # "interface" (what RCCL looks up, what the tuner exports) is added by the final
        # stage's check.
        tuner = plan.rccl_tuner
        data["rccl_tuner"].update({
            "source": {"url": tuner.url, "sha256": tuner.sha256},
            "interface_adapter": tuner.interface_adapter, "library": tuner.library,
            "probe": tuner.probe, "config": tuner.config})
    if lock.selector is not None:
        data["rocm_wheels"] = {
            "gpu_family": recipe.gpu_family, "index": recipe.wheels.index_url,
            **({"device_extras": list(recipe.device_extras)} if recipe.multi_arch else {}),
            "selector": {"name": lock.selector.name, "version": lock.selector.version,
                         "url": lock.selector.url, "sha256": lock.selector.sha256}}
    hip_git = lock.git("hipblaslt")
    if hip.enabled and hip_git:
        data["hipblaslt"].update({
            "repository": hip_git.repository, "ref": hip_git.ref,
            "commit": hip_git.commit, "subdir": hip.subdir,
            "gpu_targets": list(recipe.gpu_targets), "clients": hip.clients,
            "prefix": HIPBLASLT_PREFIX, "library": f"{HIPBLASLT_PREFIX}/lib",
            "bench": f"{HIPBLASLT_PREFIX}/bin/hipblaslt-bench" if hip.clients else None,
            "tuning_kit": _tuning_kit_paths() if hip.tuning_kit and hip.clients else None,
        })
    if plan.hipblaslt is not None and lock.git("hipblaslt"):
        # Which library torch loads, decided from its wheel; "loaded" (the files torch maps
        # and the bench links, proved one) is filled in by the final stage's check.
        data["hipblaslt"].update({
            "torch": {"version": plan.hipblaslt.torch_version,
                      "links": plan.hipblaslt.torch_links,
                      "replaced_in": plan.hipblaslt.replaces},
            "loaded": None,
        })
    plugin_git, libfabric = lock.git("network-plugin"), lock.archive("libfabric")
    if plugin.enabled and plugin_git and libfabric:
        prefix = plugin_prefix(recipe)
        data["network_plugin"].update({
            "kind": plugin.kind, "repository": plugin_git.repository,
            "ref": plugin_git.ref, "commit": plugin_git.commit,
            "prefix": prefix, "library": f"{prefix}/lib/librccl-net.so",
            "libfabric": {"version": plugin.libfabric.version, "url": libfabric.url,
                          "sha256": libfabric.sha256, "prefix": LIBFABRIC_PREFIX},
        })
        if plan.plugin is not None:
            target = plan.plugin.libfabric_target
            data["network_plugin"]["loads_with"] = {
                "oldest_libfabric": target.oldest_release, "from": target.oldest_from,
                "max_symbol_version": target.max_abi, "sites": list(recipe.sites)}
            # Filled in by the final stage from what the plugin stage read from the ELF.
            data["network_plugin"]["elf"] = None
    return data


def _tuning_kit_paths() -> dict[str, str]:
    kit = f"{HIPBLASLT_PREFIX}/tuning"
    return {"root": kit, "find_exact": f"{kit}/utilities/find_exact.py",
            "build_dir": f"{kit}/build/release",
            "usage": f"python {kit}/utilities/find_exact.py CONFIG.yaml {kit}/build/release OUT"}


def _shim() -> str:
    return ("#!/bin/sh\n"
            "# imagebuild inside the image: the validation checks, run with the image's Python\n"
            "# (standard library + torch only). Staged by imagebuild's build context.\n"
            f"{SHIM_COMMAND}\n")
