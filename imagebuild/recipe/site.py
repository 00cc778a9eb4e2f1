"""Site profiles: what a cluster needs from an image and its runtime, as data.

One YAML file per site in imagebuild/data/sites/ (or a project's sites/ directory), so
adding a site is adding a file: the GPU and its targets, the artifact formats the site's
runtime consumes, and the Container Engine EDF settings (mounts, RCCL/libfabric
environment, hook annotations). A profile may ``extends: <profile>`` another and say only
what differs: mappings merge key by key, lists and values are replaced, and a null removes
what the profile it extends set.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, overload

from imagebuild.errors import Problem, SiteProfileError, SquashError
from imagebuild.recipe import grammar
from imagebuild.recipe.located import KeyPath, NotYaml, Origin, read_mapping
from imagebuild.recipe.site_launch import (
    ApptainerSettings,
    ContainerSettings,
    NetworkSettings,
    SlurmSettings,
    parse_launch_settings,
)
from imagebuild.recipe.site_rocm import RocmSettings, parse_rocm
from imagebuild.recipe.site_sarus import SarusSuite, parse_sarus
from imagebuild.recipe.site_spec import SITE
from imagebuild.recipe.spec_check import check_against_spec

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_MOUNT = re.compile(r"^[^:\s]+:[^:\s]+(:[a-z]+(\+[a-z]+)*)?$")
_ROCM = re.compile(r"^(\d+)\.(\d+)(\.(\d+))?$")

_TOP_KEYS = {"extends", "name", "description", "gpu", "gpu_targets", "formats", "edf", "libfabric",
             "container", "network", "slurm", "apptainer", "references", "history", "rocm",
             "sarus_suite"}
_LIBFABRIC_KEYS = {"provided_by", "version", "library_dir"}
_RELEASE = re.compile(r"^\d+\.\d+(\.\d+)?$")
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
class LibfabricPolicy:
    """Where the libfabric that RCCL's network plugin calls at run time comes from.

    ``site``: the site binds its own libfabric (with the CXI provider for Slingshot) into
    the container, e.g. CSCS's CXI hook or LUMI's /opt/cray bind; the plugin must then load
    against that release, so a recipe may not build it against a newer one (libfabric
    versions its symbols). ``image``: the image's own libfabric must carry the provider.
    """

    provided_by: str  # "site" or "image"
    #: The release the site binds (provided_by: site), e.g. "1.22.0".
    version: str | None
    #: Where the bound library is inside the container, put first on the loader path.
    library_dir: str | None


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
    #: None: the profile says nothing about libfabric (no constraint on the plugin build).
    libfabric: LibfabricPolicy | None
    source: str  # where the profile was read from
    sha256: str  # of the profile file's bytes
    #: What every container runtime at the site binds and sets (EDF, apptainer, sbatch).
    container: ContainerSettings = field(default_factory=ContainerSettings)
    #: The high-speed network as the checks should find it (socket interfaces, provider).
    network: NetworkSettings = field(default_factory=NetworkSettings)
    #: How a SLURM job binds its ranks here (imagebuild validate --launcher sbatch).
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    apptainer: ApptainerSettings = field(default_factory=ApptainerSettings)
    #: The file of this system's expected figures (validate --references), as written:
    #: relative to the profile's directory unless absolute.
    references: str | None = None
    #: The system's validation history (validate --history), as written: ${VAR} and ~
    #: are expanded where the run starts, and the result must be absolute.
    history: str | None = None
    #: The newest ROCm the site runs and the settings for some releases only.
    rocm: RocmSettings = field(default_factory=RocmSettings)
    #: Sarus Suite's devices at the site; None: the site has no Sarus Suite.
    sarus_suite: SarusSuite | None = None


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


#: The environment variable every command's ``--site`` defaults to.
SITE_ENV = "IMAGEBUILD_SITE"


@overload
def default_site(fallback: str) -> str: ...
@overload
def default_site(fallback: None = None) -> str | None: ...
def default_site(fallback: str | None = None) -> str | None:
    """The default of every ``--site``: $IMAGEBUILD_SITE when set, else ``fallback`` (render's
    committed EDF files need a site: it passes the one they are committed for)."""
    return os.environ.get(SITE_ENV) or fallback


def _profile_file(name: str, project: Path | None) -> tuple[bytes, str]:
    """(text, source) of the profile ``name``: ``<project>/sites/<name>.yaml`` first, then
    the shipped ones."""
    if not _NAME.match(name):
        raise SquashError(f"--site: {name!r} is not a site name (lowercase, digits, '-', '.')")
    local = _project_sites(project)
    if local is not None and (local / f"{name}.yaml").is_file():
        # relative: the name lands in committed EDF headers
        return (local / f"{name}.yaml").read_bytes(), f"sites/{name}.yaml"
    shipped = _shipped_sites() / f"{name}.yaml"
    if not shipped.is_file():
        names = site_names(project)
        hint = difflib.get_close_matches(name, names, n=1)
        raise SquashError(f"--site: no site profile {name!r}"
                          + (f"; did you mean {hint[0]!r}?" if hint else "")
                          + f" (known: {', '.join(names) or 'none'})")
    return shipped.read_bytes(), f"imagebuild/data/sites/{name}.yaml"


def load_site(name: str, project: Path | None = None) -> SiteProfile:
    """A site profile by name: ``<project>/sites/<name>.yaml`` first, then the shipped ones."""
    data, source = _profile_file(name, project)
    return parse_site(data, source, project)


def site_directory(site: SiteProfile, project: Path | None = None) -> Path:
    """The directory a profile was read from (its relative file names start there)."""
    if site.source.startswith("sites/") and project is not None:
        return project / "sites"
    return Path(str(_shipped_sites()))


def _read_profile(data: bytes, source: str, shape: list[Problem]
                  ) -> tuple[dict[str, Any], dict[KeyPath, Origin]]:
    try:
        read = read_mapping(data.decode(), Path(source), shape)
    except UnicodeDecodeError as exc:
        raise SiteProfileError([Problem(source, None, "", f"not valid YAML: {exc}")]) from exc
    except NotYaml as exc:
        raise SiteProfileError([Problem(source, exc.line, "", f"not valid YAML: {exc.what}")]
                               ) from exc
    if read is None:
        raise SiteProfileError([Problem(source, None, "", "expected a mapping of keys")])
    return read


def _extended(raw: dict[str, Any], origins: dict[KeyPath, Origin], source: str,
              project: Path | None, seen: tuple[str, ...]) -> tuple[dict[str, Any], bytes]:
    """The profile ``raw`` on top of the one it ``extends`` (and that one's), and the text
    of every file of the chain (for the profile's sha256)."""
    parent = raw.get("extends")
    if parent is None:
        return raw, b""
    line = origins[("extends",)].line if ("extends",) in origins else None
    if not isinstance(parent, str) or not _NAME.match(parent):
        raise SiteProfileError([Problem(source, line, "extends",
                                        f"expected a site profile's name, got {parent!r}")])
    if parent in seen:
        raise SiteProfileError([Problem(source, line, "extends", "profiles extend each other "
                                        f"in a cycle: {' -> '.join((*seen, parent))}")])
    try:
        data, parent_source = _profile_file(parent, project)
    except SquashError as exc:
        raise SiteProfileError([Problem(source, line, "extends", exc.message)]) from exc
    base, base_origins = _read_profile(data, parent_source, [])
    base, chain = _extended(base, base_origins, parent_source, project, (*seen, parent))
    base.pop("extends", None)
    _merge_profile(base, {k: v for k, v in raw.items() if k != "extends"})
    return base, data + chain


def _merge_profile(into: dict[str, Any], child: dict[str, Any]) -> None:
    for key, value in child.items():
        if value is None:
            into.pop(key, None)
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge_profile(into[key], value)
        else:
            into[key] = value


def parse_site(data: bytes, source: str, project: Path | None = None) -> SiteProfile:
    """Validate a site profile; every problem is reported at once, with its line. A profile
    that ``extends`` another finds it by name in ``project``'s sites/, then the shipped
    ones."""
    problems: list[Problem] = []
    shape: list[Problem] = []
    raw, origins = _read_profile(data, source, shape)
    raw, chain = _extended(raw, origins, source, project, (str(raw.get("name")),))
    # Dotted keys: a key may hold dots itself (an annotation: com.hooks.cxi.enabled).
    lines = {".".join(path): origin.line for path, origin in origins.items() if path}

    def problem(key: str, message: str) -> None:
        # A missing key has no line: name the line of the section it is missing from.
        parts = key.split(".")
        line = next((lines[k] for k in (".".join(parts[:n]) for n in range(len(parts), 0, -1))
                     if k in lines), None)
        problems.append(Problem(source, line, key, message))

    shape = _shape_problems(raw, origins, shape, source)
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
    libfabric = _libfabric(raw.get("libfabric"), problem)
    launch = parse_launch_settings(raw, problem,
                                   library_dir=libfabric.library_dir if libfabric else None)
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
        libfabric=libfabric,
        source=source,
        sha256=hashlib.sha256(data + chain).hexdigest(),
        container=launch.container,
        network=launch.network,
        slurm=launch.slurm,
        apptainer=launch.apptainer,
        references=text("references", raw.get("references"), required=False) or None,
        history=text("history", raw.get("history"), required=False) or None,
        rocm=parse_rocm(raw.get("rocm"), problem),
        sarus_suite=parse_sarus(raw.get("sarus_suite")),
    )
    problems += [p for p in shape if not any(_related(p.key, q.key) for q in problems)]
    if problems:
        raise SiteProfileError(sorted(problems, key=lambda p: p.line or 0))
    return profile


def _shape_problems(data: dict[str, Any], origins: dict[KeyPath, Origin],
                    problems: list[Problem], source: str) -> list[Problem]:
    """Every place the profile departs from the format (``site_spec.SITE``), found by the
    recipe's validator (``problems`` holds the reader's: duplicate and non-string keys):
    types, grammars, enums, unknown keys."""
    check_against_spec(SITE, data, (), Path(source), origins, problems)
    # The source as given (not made relative): it lands in messages as the caller named it.
    return [Problem(source, p.line, p.key, p.message) for p in problems]


def _related(key: str, other: str) -> bool:
    """One key path is the other or inside it (``a.b``, ``a.b.c``, ``a.b[0]``): a problem
    the profile's own rules already named there is not named twice."""
    def within(inner: str, outer: str) -> bool:
        return inner == outer or inner.startswith((outer + ".", outer + "["))
    return within(key, other) or within(other, key)


def _libfabric(raw: Any, problem: Any) -> LibfabricPolicy | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        problem("libfabric", "expected a mapping with provided_by (site or image)")
        return None
    for key in sorted(set(raw) - _LIBFABRIC_KEYS):
        problem(f"libfabric.{key}",
                f"unknown key (expected one of {', '.join(sorted(_LIBFABRIC_KEYS))})")
    provided_by = raw.get("provided_by")
    if provided_by not in ("site", "image"):
        problem("libfabric.provided_by", f"expected site or image, got {provided_by!r}")
        return None
    version = raw.get("version")
    library_dir = raw.get("library_dir")
    if provided_by == "site":
        if not isinstance(version, str) or not _RELEASE.match(version):
            problem("libfabric.version", "expected the release the site binds, like "
                    f"\"1.22.0\" (quote it), got {version!r}")
            version = None
    elif version is not None:
        problem("libfabric.version", "only for provided_by: site (the image's libfabric "
                "release is the recipe's network_plugin.libfabric.version)")
        version = None
    if library_dir is not None and (not isinstance(library_dir, str)
                                    or not re.match(grammar.RELEASE_DIR, library_dir)):
        problem("libfabric.library_dir", "expected an absolute directory (one component may "
                f"be *, the newest release there), got {library_dir!r}")
        library_dir = None
    return LibfabricPolicy(provided_by, version, library_dir)


# --- rendering --------------------------------------------------------------------------------
