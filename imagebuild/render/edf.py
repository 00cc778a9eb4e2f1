"""EDF (Environment Definition File, TOML) for CSCS's Container Engine, from a site profile.

An EDF tells the Container Engine which squashfs to run and how (``srun
--environment=envs/<recipe>.toml``). Keys documented by CSCS
(https://docs.cscs.ch/software/container-engine/): image, base_environment, workdir, entrypoint, writable, mounts
("SRC:DST[:FLAGS]"), [env], [annotations]; ``${VAR}`` is expanded in all fields.

Site facts come from a site profile (imagebuild.recipe.site). ``render_edf`` is a pure
function of its inputs and writes their hash into the header, so ``render --check`` can
re-render and compare.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomli_w

from imagebuild import components
from imagebuild.errors import SquashError
from imagebuild.files import canonical_digest
from imagebuild.generated import GeneratedFile
from imagebuild.recipe.image_network import ImageNetwork
from imagebuild.recipe.model import Recipe
from imagebuild.recipe.site import SiteProfile, load_site
from imagebuild.recipe.site_runtime import fitted_env, loader_dir, network_fit, site_binds

if TYPE_CHECKING:
    from imagebuild.tune.apply import RuntimeTuning

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_ROCM = re.compile(r"^(\d+)\.(\d+)(\.(\d+))?$")


def rocm_major(rocm_version: str) -> int:
    match = _ROCM.match(rocm_version)
    if not match:
        raise SquashError(f"--rocm-version: expected X.Y or X.Y.Z, got {rocm_version!r}")
    return int(match.group(1))


def hook_annotations(site: SiteProfile, rocm_version: str | None) -> tuple[dict[str, str], str]:
    """The aws_ofi_nccl hook annotations for this ROCm version, and a one-line why.

    One plugin per job: the hook is enabled only where the profile chooses the site's
    plugin (``network.plugin: site``); otherwise RCCL loads the image's own
    (NCCL_NET_PLUGIN is an absolute path, tried before any name the hook could provide),
    and the hook stays off so that nothing else is injected beside it."""
    hook = site.aws_ofi_nccl_hook
    plugin = site.network.plugin
    if plugin != "site":
        why = {"image": "the image's own RCCL network plugin is used (network.plugin: image)",
               "none": "RCCL's own InfiniBand/RoCE transport is used (network.plugin: none)"}
        return {}, f"aws_ofi_nccl hook: off; {why.get(plugin, plugin)}"
    if hook is None:
        raise SquashError(f"{site.source}: network.plugin: site needs edf.aws_ofi_nccl_hook "
                          "(the hook's annotation prefix and variants)")
    if rocm_version is None:
        return {}, "aws_ofi_nccl hook: off (CPU-only image, no ROCm)"
    major = rocm_major(rocm_version)
    variant = hook.variant_for(major)
    if variant is None:
        known = ", ".join(f"{n} (ROCm {m})" for n, m in hook.variants) or "none"
        raise SquashError(f"{site.source}: network.plugin: site, but the aws_ofi_nccl hook has "
                          f"no variant for ROCm {major} (site has: {known}); use "
                          "network.plugin: image for this image")
    return ({f"{hook.annotation_prefix}.enabled": "true",
             f"{hook.annotation_prefix}.variant": variant},
            (f"aws_ofi_nccl hook: on, variant {variant} matches ROCm {major}; the image's "
             "NCCL_NET_PLUGIN is unset so RCCL loads the hook's plugin"))


def edf_image_path(site: SiteProfile, sqsh: Path) -> str:
    """Where the EDF says the image is: the site's image_dir (``${VAR}`` allowed) or the
    local artifact's absolute path."""
    if site.image_dir:
        return f"{site.image_dir.rstrip('/')}/{sqsh.name}"
    return str(sqsh.resolve())


def edf_mounts(site: SiteProfile) -> list[str]:
    """The site's container binds (every runtime), then its EDF-only mounts."""
    mounts: list[str] = []
    for mount in [b.spec() for b in site_binds(site)] + list(site.mounts):
        if mount not in mounts:
            mounts.append(mount)
    return mounts


def edf_env(site: SiteProfile, network: ImageNetwork | None = None,
            rocm: str | None = None) -> dict[str, str]:
    """The site's container environment fitted to the image's network (``network``,
    imagebuild.recipe.site_runtime.fitted_env), its EDF-only entries, and the site-bound
    libfabric directory first on LD_LIBRARY_PATH. ${LD_LIBRARY_PATH} is the image's (the
    Container Engine resolves references from the image's environment first,
    https://docs.cscs.ch/software/container-engine/edf/#environment-variable-expansion);
    an image that sets none makes the Container Engine stop with an error, not run with the
    current directory on the loader path."""
    env = _fitted(site, network, rocm)[0]
    if site.network.plugin == "site":
        # An empty value unsets the variable in the container
        # (https://docs.cscs.ch/software/container-engine/edf/#env).
        env["NCCL_NET_PLUGIN"] = ""
    directory = loader_dir(site)
    if directory and "*" in directory:
        # An EDF has no shell to find the newest release: it names the profile's own.
        release = site.libfabric.version if site.libfabric else None
        if not release:
            raise SquashError(f"site {site.name}: libfabric.library_dir {directory} names its "
                              "release with *, which an EDF cannot resolve without "
                              "libfabric.version")
        directory = directory.replace("*", release)
    if directory and (network is None or network.plugin is not None):
        env["LD_LIBRARY_PATH"] = f"{directory}:${{LD_LIBRARY_PATH}}"
    return dict(sorted(env.items()))


def _network_note(site: SiteProfile, network: ImageNetwork | None) -> str:
    if network is None:
        return "image network: unknown (no recipe); the site profile's settings as written"
    left_out = _fitted(site, network, network.rocm)[1]
    return network.said() + (f"; left out, the image cannot use them: {', '.join(left_out)}"
                             if left_out else "")


def _fitted(site: SiteProfile, network: ImageNetwork | None, rocm: str | None
            ) -> tuple[dict[str, str], tuple[str, ...]]:
    """Every runtime's environment and the EDF's own entries, fitted to the image and its
    ROCm release; and the profile's variables left out."""
    env, left_out = fitted_env(site, network, rocm)
    extra = dict(site.env)
    if network is not None:
        extra_out = network_fit(site, network, extra)
        extra = {k: v for k, v in extra.items() if k not in extra_out}
        left_out = tuple(sorted({*left_out, *extra_out}))
    return {**env, **extra}, left_out


def _toml_value(value: str | bool | list[str]) -> str:
    return tomli_w.dumps({"v": value}).split("=", 1)[1].strip()


def render_edf(
    *,
    recipe: str,
    image: str,
    site: SiteProfile,
    rocm_version: str | None,
    workdir: str | None = None,
    image_sha256: str | None = None,
    regenerate: str | None = None,
    tuning: RuntimeTuning | None = None,
    network: ImageNetwork | None = None,
    notes: tuple[str, ...] = (),
) -> str:
    """EDF TOML text for ``recipe`` at ``site``. Pure: same inputs, same bytes.

    ``image`` is the squashfs path as the EDF should say it; ``workdir`` the image's
    WORKDIR (a site profile's workdir wins); ``image_sha256`` the squashfs digest, recorded
    so the EDF goes stale when the image changes. ``tuning``: a tuning bundle to mount
    read-only and the variables that load it (imagebuild.tune.apply), after the site's.
    ``network``: what the image carries for RCCL's network (its plan's
    ``image_network``); the environment names no network the image cannot load. None: an
    image of unknown content, the profile's settings as written (the header says so).
    ``notes``: comment lines on what the image offers a job (its components' EDF notes).
    """
    hook, hook_note = hook_annotations(site, rocm_version)
    if network is not None and network.plugin is None and site.network.plugin == "image":
        hook_note = ("aws_ofi_nccl hook: off; the image carries no network plugin: RCCL's "
                     "socket transport between nodes")
    annotations = dict(site.annotations)
    annotations.update(hook)
    workdir = site.workdir or workdir or None
    inputs: dict[str, Any] = {"recipe": recipe, "image": image, "image_sha256": image_sha256,
              "rocm": rocm_version, "workdir": workdir,
              "site": {"name": site.name, "sha256": site.sha256}}
    if network is not None:
        inputs["network"] = asdict(network)
    if notes:
        inputs["notes"] = list(notes)
    if tuning is not None:
        inputs["tuning"] = {"mounts": tuning.edf_mounts(), "env": tuning.env_dict()}
    header = [
        f"# Generated by imagebuild for recipe {recipe} at site {site.name}; do not edit.",
        f"# Regenerate: {regenerate or f'imagebuild squash {recipe} --site {site.name}'}",
        f"# site profile: {site.source} sha256:{site.sha256}",
        f"# image: {image}" + (f" sha256:{image_sha256}" if image_sha256 else ""),
        f"# rocm: {rocm_version or 'none'}; {hook_note}",
        f"# {_network_note(site, network)}",
        f"# input-hash: {canonical_digest(inputs)}",
        "# Use: srun --environment=<this file> ...",
    ]
    header[-1:-1] = [f"# {line}" for line in notes]
    if tuning is not None:
        header[-1:-1] = [f"# tuning bundle: {mount} (loaded by the variables "
                         f"{', '.join(tuning.env_dict())})" for mount in tuning.edf_mounts()]
    top: dict[str, Any] = {"image": image}
    if workdir:
        top["workdir"] = workdir
    top["writable"] = site.writable
    mounts = edf_mounts(site) + (tuning.edf_mounts() if tuning is not None else [])
    if mounts:
        top["mounts"] = mounts
    body = tomli_w.dumps(top, multiline_strings=False)
    env = {**edf_env(site, network, rocm_version), **(tuning.env_dict() if tuning is not None else {})}
    if env:
        body += "\n" + tomli_w.dumps({"env": env})
    if annotations:
        # Dotted bare keys, as CSCS documents them (com.hooks.cxi.enabled = "true"): TOML
        # reads them as nested tables, exactly what the documented examples produce.
        lines = ["", "[annotations]"]
        for key in sorted(annotations):
            if not all(_BARE_KEY.match(part) for part in key.split(".")):
                raise SquashError(f"{site.source}: edf.annotations.{key}: not a dotted bare key")
            lines.append(f"{key} = {_toml_value(annotations[key])}")
        body += "\n".join(lines) + "\n"
    return "\n".join(header) + "\n" + body


def edf_path(project: Path, recipe: str) -> Path:
    return project / "envs" / f"{recipe}.toml"


#: The site the committed envs/<recipe>.toml files are rendered for (`imagebuild render
#: --site` picks another): this project's first users run on CSCS Alps/Beverin.
DEFAULT_SITE = "cscs-beverin"


def generated_edf(recipe: Recipe, project: Path, site_name: str = DEFAULT_SITE,
                  network: ImageNetwork | None = None) -> GeneratedFile:
    """envs/<recipe>.toml as committed: from the recipe, what its plan puts in the image
    (``network``: ``BuildPlan.image_network``) and the site profile (no image hash), so it
    is reviewable before any build and `imagebuild render --check` guards it.
    The EDF written beside a built .sqsh also records that image's sha256."""
    site = load_site(site_name, project)
    command = f"imagebuild render {recipe.name}" + (
        f" --site {site_name}" if site_name != DEFAULT_SITE else "")
    # A site without an image directory gets the default artifacts path, never this
    # machine's absolute path (the file is committed).
    image = edf_image_path(site, Path(f"{recipe.name}.sqsh")) if site.image_dir \
        else f"${{PWD}}/artifacts/{recipe.name}.sqsh"
    notes = tuple(line for component, section in components.enabled(recipe)
                  for line in component.edf_notes(section))
    text = render_edf(recipe=recipe.name, image=image, site=site, rocm_version=recipe.rocm,
                      regenerate=command, network=network, notes=notes)
    return GeneratedFile(edf_path(project, recipe.name), text, command=command)


def read_edf(path: Path) -> dict[str, Any]:
    """An EDF file parsed (TOML tables; [annotations] as nested tables)."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SquashError(f"{path}: cannot read the EDF: {exc}") from exc


def edf_workdir(path: Path) -> str | None:
    """The workdir an EDF records (squash reads it from the image), or None when the file
    is missing, unreadable or sets none."""
    try:
        workdir = read_edf(path).get("workdir")
    except SquashError:
        return None
    return workdir if isinstance(workdir, str) else None


def flatten_annotations(table: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Parsed [annotations] (nested tables) -> ``{"com.hooks.cxi.enabled": "true"}``."""
    out: dict[str, str] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten_annotations(value, name + "."))
        else:
            out[name] = value
    return out
