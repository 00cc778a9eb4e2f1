"""EDF (Environment Definition File, TOML) for CSCS's Container Engine, from a site profile.

An EDF tells the Container Engine which squashfs to run and how (``srun
--environment=envs/<recipe>.toml``). Documented keys (REFERENCE.md "CSCS Container
Engine: EDF"): image, base_environment, workdir, entrypoint, writable, mounts
("SRC:DST[:FLAGS]"), [env], [annotations]; ``${VAR}`` is expanded in all fields.

Site facts are data: one YAML file per site in imagebuild/data/sites/ (or a project's
sites/ directory), so adding a site is adding a file. ``render_edf`` is a pure function
of its inputs and writes their hash into the header (DESIGN principle 3), so a ``--check``
can re-render and compare.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import tomli_w
import yaml

from imagebuild.errors import Problem, SiteProfileError, SquashError
from imagebuild.generated import GeneratedFile
from imagebuild.model import Recipe

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_MOUNT = re.compile(r"^[^:\s]+:[^:\s]+(:[a-z]+(\+[a-z]+)*)?$")
_ROCM = re.compile(r"^(\d+)\.(\d+)(\.(\d+))?$")

_TOP_KEYS = {"name", "description", "gpu", "gpu_targets", "formats", "edf"}
_EDF_KEYS = {"image_dir", "workdir", "writable", "mounts", "env", "annotations",
             "aws_ofi_nccl_hook"}


@dataclass(frozen=True)
class HookVariants:
    """A site hook that exists in variants built for one ROCm major each."""

    annotation_prefix: str
    variants: tuple[tuple[str, int], ...]  # (variant name, ROCm major)

    def variant_for(self, rocm_major: int) -> str | None:
        return next((name for name, major in self.variants if major == rocm_major), None)


@dataclass(frozen=True)
class SiteProfile:
    name: str
    description: str
    gpu: str
    gpu_targets: tuple[str, ...]
    formats: tuple[str, ...]
    image_dir: str | None
    workdir: str | None
    writable: bool
    mounts: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    annotations: tuple[tuple[str, str], ...]
    aws_ofi_nccl_hook: HookVariants | None
    source: str  # where the profile was read from
    sha256: str  # of the profile file's bytes


# --- loading ----------------------------------------------------------------------------------

def _shipped_sites() -> Any:
    # package data (pyproject: data/**/*), not a package: no __init__.py needed there
    return resources.files("imagebuild") / "data" / "sites"


def _project_sites(project: Path | None) -> Path | None:
    return project / "sites" if project is not None else None


def site_names(project: Path | None = None) -> list[str]:
    names = {p.name[:-5] for p in _shipped_sites().iterdir()
             if p.name.endswith(".yaml")}
    local = _project_sites(project)
    if local is not None and local.is_dir():
        names |= {p.stem for p in local.glob("*.yaml")}
    return sorted(names)


def load_site(name: str, project: Path | None = None) -> SiteProfile:
    """A site profile by name: ``<project>/sites/<name>.yaml`` first, then the shipped ones."""
    if not _NAME.match(name):
        raise SquashError(f"--site: {name!r} is not a site name (lowercase, digits, '-', '.')")
    local = _project_sites(project)
    if local is not None and (local / f"{name}.yaml").is_file():
        path = local / f"{name}.yaml"
        # relative: the name lands in committed EDF headers
        return parse_site(path.read_bytes(), f"sites/{name}.yaml")
    shipped = _shipped_sites() / f"{name}.yaml"
    if not shipped.is_file():
        known = ", ".join(site_names(project)) or "none"
        raise SquashError(f"--site: no site profile {name!r} (known: {known})")
    return parse_site(shipped.read_bytes(), f"imagebuild/data/sites/{name}.yaml")


def _lines(node: yaml.Node, prefix: str = "") -> dict[str, int]:
    """Key path -> 1-based line, from the YAML node tree (for error messages)."""
    out: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            path = f"{prefix}{key.value}"
            out[path] = key.start_mark.line + 1
            out.update(_lines(value, path + "."))
    return out


def parse_site(data: bytes, source: str) -> SiteProfile:
    """Validate a site profile; every problem is reported at once, with its line."""
    problems: list[Problem] = []
    try:
        node = yaml.compose(data.decode())
        raw = yaml.safe_load(data.decode())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise SiteProfileError([Problem(source, None, "", f"not valid YAML: {exc}")]) from exc
    lines = _lines(node) if node is not None else {}

    def problem(key: str, message: str) -> None:
        problems.append(Problem(source, lines.get(key), key, message))

    if not isinstance(raw, dict):
        raise SiteProfileError([Problem(source, None, "", "expected a mapping of keys")])
    for key in sorted(set(raw) - _TOP_KEYS):
        problem(key, f"unknown key (expected one of {', '.join(sorted(_TOP_KEYS))})")
    edf = raw.get("edf") or {}
    if not isinstance(edf, dict):
        problem("edf", "expected a mapping")
        edf = {}
    for key in sorted(set(edf) - _EDF_KEYS):
        problem(f"edf.{key}", f"unknown key (expected one of {', '.join(sorted(_EDF_KEYS))})")

    def text(key: str, value: Any, required: bool = True) -> str:
        if value is None and not required:
            return ""
        if not isinstance(value, str) or (required and not value):
            problem(key, f"expected a non-empty string, got {value!r}")
            return ""
        return value

    def strings(key: str, value: Any) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            problem(key, "expected a list of strings")
            return ()
        return tuple(value)

    def mapping(key: str, value: Any, key_pattern: re.Pattern[str]) -> tuple[tuple[str, str], ...]:
        if value is None:
            return ()
        if not isinstance(value, dict):
            problem(key, "expected a mapping of names to strings")
            return ()
        out = []
        for k, v in value.items():
            if not isinstance(k, str) or not key_pattern.match(k):
                problem(f"{key}.{k}", "not a valid name")
            elif not isinstance(v, str):
                problem(f"{key}.{k}", f"expected a string (quote it in YAML), got {v!r}")
            else:
                out.append((k, v))
        return tuple(sorted(out))

    name = text("name", raw.get("name"))
    if name and not _NAME.match(name):
        problem("name", "expected lowercase letters, digits, '-' or '.'")
    formats = strings("formats", raw.get("formats")) or ("sqsh",)
    for fmt in formats:
        if fmt not in ("sqsh", "sif"):
            problem("formats", f"unknown format {fmt!r} (expected sqsh or sif)")
    mounts = strings("edf.mounts", edf.get("mounts"))
    for mount in mounts:
        if not _MOUNT.match(mount):
            problem("edf.mounts", f"{mount!r}: expected SRC:DST[:FLAGS], flags joined with +")
    writable = edf.get("writable", True)
    if not isinstance(writable, bool):
        problem("edf.writable", f"expected true or false, got {writable!r}")
        writable = True
    annotations = mapping("edf.annotations", edf.get("annotations"),
                          re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$"))
    hook = None
    hook_raw = edf.get("aws_ofi_nccl_hook")
    if hook_raw is not None:
        if not isinstance(hook_raw, dict) or set(hook_raw) != {"annotation_prefix", "variants"}:
            problem("edf.aws_ofi_nccl_hook", "expected keys annotation_prefix and variants")
        else:
            prefix = text("edf.aws_ofi_nccl_hook.annotation_prefix", hook_raw["annotation_prefix"])
            variants = hook_raw["variants"] or {}
            if not isinstance(variants, dict) or not all(
                    isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                    for k, v in variants.items()):
                problem("edf.aws_ofi_nccl_hook.variants",
                        "expected a mapping of variant name to ROCm major (e.g. rocm6: 6)")
                variants = {}
            hook = HookVariants(prefix, tuple(sorted(variants.items())))
    profile = SiteProfile(
        name=name,
        description=text("description", raw.get("description"), required=False),
        gpu=text("gpu", raw.get("gpu"), required=False),
        gpu_targets=strings("gpu_targets", raw.get("gpu_targets")),
        formats=formats,
        image_dir=text("edf.image_dir", edf.get("image_dir"), required=False) or None,
        workdir=text("edf.workdir", edf.get("workdir"), required=False) or None,
        writable=writable,
        mounts=mounts,
        env=mapping("edf.env", edf.get("env"), _ENV_NAME),
        annotations=annotations,
        aws_ofi_nccl_hook=hook,
        source=source,
        sha256=hashlib.sha256(data).hexdigest(),
    )
    if problems:
        raise SiteProfileError(problems)
    return profile


# --- rendering --------------------------------------------------------------------------------

def rocm_major(rocm_version: str) -> int:
    match = _ROCM.match(rocm_version)
    if not match:
        raise SquashError(f"--rocm-version: expected X.Y or X.Y.Z, got {rocm_version!r}")
    return int(match.group(1))


def hook_annotations(site: SiteProfile, rocm_version: str | None) -> tuple[dict[str, str], str]:
    """The aws_ofi_nccl hook annotations for this ROCm version, and a one-line why."""
    hook = site.aws_ofi_nccl_hook
    if hook is None:
        return {}, "aws_ofi_nccl hook: not used at this site"
    if rocm_version is None:
        return {}, "aws_ofi_nccl hook: off (CPU-only image, no ROCm)"
    major = rocm_major(rocm_version)
    variant = hook.variant_for(major)
    if variant is None:
        known = ", ".join(f"{n} (ROCm {m})" for n, m in hook.variants) or "none"
        return {}, (f"aws_ofi_nccl hook: off, no variant for ROCm {major} (site has: {known}); "
                    "the image's own RCCL network plugin is used")
    return ({f"{hook.annotation_prefix}.enabled": "true",
             f"{hook.annotation_prefix}.variant": variant},
            f"aws_ofi_nccl hook: on, variant {variant} matches ROCm {major}")


def edf_image_path(site: SiteProfile, sqsh: Path) -> str:
    """Where the EDF says the image is: the site's image_dir (``${VAR}`` allowed) or the
    local artifact's absolute path."""
    if site.image_dir:
        return f"{site.image_dir.rstrip('/')}/{sqsh.name}"
    return str(sqsh.resolve())


def input_hash(inputs: dict[str, Any]) -> str:
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


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
) -> str:
    """EDF TOML text for ``recipe`` at ``site``. Pure: same inputs, same bytes.

    ``image`` is the squashfs path as the EDF should say it; ``workdir`` the image's
    WORKDIR (a site profile's workdir wins); ``image_sha256`` the squashfs digest, recorded
    so the EDF goes stale when the image changes.
    """
    hook, hook_note = hook_annotations(site, rocm_version)
    annotations = dict(site.annotations)
    annotations.update(hook)
    workdir = site.workdir or workdir or None
    inputs = {"recipe": recipe, "image": image, "image_sha256": image_sha256,
              "rocm": rocm_version, "workdir": workdir,
              "site": {"name": site.name, "sha256": site.sha256}}
    header = [
        f"# Generated by imagebuild for recipe {recipe} at site {site.name}; do not edit.",
        f"# Regenerate: {regenerate or f'imagebuild squash {recipe} --site {site.name}'}",
        f"# site profile: {site.source} sha256:{site.sha256}",
        f"# image: {image}" + (f" sha256:{image_sha256}" if image_sha256 else ""),
        f"# rocm: {rocm_version or 'none'}; {hook_note}",
        f"# input-hash: {input_hash(inputs)}",
        "# Use: srun --environment=<this file> ...",
    ]
    top: dict[str, Any] = {"image": image}
    if workdir:
        top["workdir"] = workdir
    top["writable"] = site.writable
    if site.mounts:
        top["mounts"] = list(site.mounts)
    body = tomli_w.dumps(top, multiline_strings=False)
    if site.env:
        body += "\n" + tomli_w.dumps({"env": dict(site.env)})
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


def generated_edf(recipe: Recipe, project: Path, site_name: str = DEFAULT_SITE
                  ) -> GeneratedFile:
    """envs/<recipe>.toml as committed: from the recipe and the site profile alone (no image
    hash), so it is reviewable before any build and `imagebuild render --check` guards it.
    The EDF written beside a built .sqsh also records that image's sha256."""
    site = load_site(site_name, project)
    command = f"imagebuild render {recipe.name}" + (
        f" --site {site_name}" if site_name != DEFAULT_SITE else "")
    # A site without an image directory gets the default artifacts path, never this
    # machine's absolute path (the file is committed).
    image = edf_image_path(site, Path(f"{recipe.name}.sqsh")) if site.image_dir \
        else f"${{PWD}}/artifacts/{recipe.name}.sqsh"
    text = render_edf(recipe=recipe.name, image=image, site=site, rocm_version=recipe.rocm,
                      regenerate=command)
    return GeneratedFile(edf_path(project, recipe.name), text, command=command)


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
