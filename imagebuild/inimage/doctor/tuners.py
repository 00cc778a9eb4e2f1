"""tuners: two tuners in one process, the network plugin's own and imagebuild's.

RCCL loads one tuner per process (ROCm/rocm-systems projects/rccl/src/plugin/tuner.cc,
ncclTunerPluginLoad): the library NCCL_TUNER_PLUGIN names ("none": no tuner), else the
network plugin's library when it exports ncclTunerPlugin_v<N>, else its built-in CSV tuner
when a config is found. So where the image carries both imagebuild's tuner (recipe
rccl_tuner:, named by the image's NCCL_TUNER_PLUGIN) and a plugin that exports a tuner, one
of them is silently not used: with NCCL_TUNER_PLUGIN unset the plugin's tuner wins and
imagebuild's tuner configuration (NCCL_TUNER_CONFIG_FILE) is never read. imagebuild builds
aws-ofi-nccl with --disable-platform-aws, which leaves the tuner out (src/Makefile.am adds
its sources only with platform-aws); a plugin from elsewhere may carry it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .elf import ElfError, read_dynamic
from .finding import Finding, passed, skipped, warned
from .libraries import resolve
from .needs import ImageNeeds

ITEM = "tuners"
EXPORT_PREFIX = "ncclTunerPlugin_v"


def plugin_tuner(root: Path, needs: ImageNeeds, in_image: bool) -> tuple[str, ...] | None:
    """The tuner interfaces the network plugin exports: read from its ELF inside the image,
    else what the needs say (None: not known)."""
    if in_image and needs.plugin_library:
        try:
            info = read_dynamic(root / resolve(root, needs.plugin_library).lstrip("/"))
        except ElfError:
            return needs.plugin_tuner
        return tuple(sorted(s for s in info.exports if s.startswith(EXPORT_PREFIX)))
    return needs.plugin_tuner


def loaded_tuner(needs: ImageNeeds, env: Mapping[str, str],
                 plugin_exports: tuple[str, ...] | None, in_image: bool = False
                 ) -> tuple[str | None, str]:
    """(the tuner library RCCL loads, why): NCCL_TUNER_PLUGIN as the job sets it; from the
    host, which does not see the image's ENV, else as the image sets it (its manifest names
    imagebuild's tuner); else the plugin's own."""
    named = env.get("NCCL_TUNER_PLUGIN")
    if named is None and needs.rccl_tuner_library and not in_image:
        named = needs.rccl_tuner_library
    if named is not None:
        if named.strip().lower() == "none":
            return None, "NCCL_TUNER_PLUGIN=none"
        return named, "NCCL_TUNER_PLUGIN"
    if needs.plugin and plugin_exports:
        return needs.plugin_library, "no NCCL_TUNER_PLUGIN: the network plugin's own"
    return None, "no NCCL_TUNER_PLUGIN"


def same_library(a: str | None, b: str | None) -> bool:
    """One library, named by path or by file name (RCCL dlopens a bare name)."""
    return bool(a and b) and (a == b or Path(str(a)).name == Path(str(b)).name)


def uses_plugin_tuner(needs: ImageNeeds, env: Mapping[str, str],
                      plugin_exports: tuple[str, ...] | None, in_image: bool = False
                      ) -> bool | None:
    """Whether RCCL runs the plugin's own tuner (plugin_release's tuner ranges apply);
    None: it depends on the plugin's symbols, which are not known here."""
    if not needs.plugin:
        return False
    library, _ = loaded_tuner(needs, env, plugin_exports, in_image)
    if library is not None:
        if not same_library(library, needs.plugin_library):
            return False
        return bool(plugin_exports) if plugin_exports is not None else None
    if env.get("NCCL_TUNER_PLUGIN") is not None:
        return False  # NCCL_TUNER_PLUGIN=none
    return None if plugin_exports is None else False


def check(needs: ImageNeeds, env: Mapping[str, str], plugin_exports: tuple[str, ...] | None,
          in_image: bool = False) -> Finding:
    ours = needs.rccl_tuner_library
    config = env.get("NCCL_TUNER_CONFIG_FILE") or needs.rccl_tuner_config
    theirs = bool(needs.plugin and plugin_exports)
    if not ours and not theirs:
        plugin = ("whether the network plugin carries one is read from its symbols inside "
                  "the image" if plugin_exports is None and needs.plugin else
                  "none in the network plugin")
        return skipped(ITEM, f"no imagebuild tuner; {plugin}")
    library, why = loaded_tuner(needs, env, plugin_exports, in_image)
    their_name = f"the network plugin's tuner ({', '.join(plugin_exports or ())})"
    if not theirs:
        if same_library(library, ours):
            setting = f", configuration {config}" if config else ", no configuration"
            return passed(ITEM, f"RCCL loads the image's tuner {ours} ({why}){setting}")
        return warned(ITEM, f"the image carries imagebuild's tuner {ours}, but RCCL loads "
                      f"{library or 'no tuner'} ({why})", f"set NCCL_TUNER_PLUGIN={ours}, or "
                      "unset it to use the image's")
    if not ours:
        return passed(ITEM, f"one tuner: {their_name}, loaded by RCCL ({why})"
                      if same_library(library, needs.plugin_library) else
                      f"{their_name} is not used: RCCL loads {library or 'no tuner'} ({why})")
    if same_library(library, ours):
        return passed(ITEM, f"two tuners in the image; RCCL loads one, imagebuild's {ours} "
                      f"({why}), and leaves {their_name} unused")
    ignored = f", and NCCL_TUNER_CONFIG_FILE={config} is read by no tuner" if config else ""
    return warned(ITEM, f"two tuners in the image: RCCL loads {library or 'no tuner'} ({why}), "
                  f"not imagebuild's {ours}{ignored}",
                  f"set NCCL_TUNER_PLUGIN={ours} (the image's tuner reads the tuning bundle's "
                  "configuration)")
