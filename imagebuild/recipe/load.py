"""YAML recipe -> Recipe: load, resolve ``extends``, validate, apply defaults.

Every problem is collected before anything is raised, so a user fixes a broken recipe in one
round: each comes out as ``file:line: key.path: what was expected`` (with a did-you-mean for
unknown keys). Line numbers come from the YAML node tree, and survive ``extends`` merging
because every leaf remembers the file and line it came from.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from imagebuild import components
from imagebuild.errors import Problem, RecipeError, RecipeNotFound
from imagebuild.project import project_dir
from imagebuild.recipe import grammar, spec
from imagebuild.recipe.format import defaults, lookup, recipe_spec
from imagebuild.recipe.gpu_family import (
    FamilyError,
    device_extras,
    family_of,
    multi_arch_index,
    untested,
)
from imagebuild.recipe.model import (
    RADEON_INDEX,
    ROCM_WHEELS_INDEX,
    Recipe,
    Section,
    WheelLayout,
    Wheels,
)
from imagebuild.recipe.rocm_layout import is_therock_line, system_prefix

RECIPE_SUFFIX = ".yaml"

Path_ = tuple[str, ...]


@dataclass(frozen=True)
class Origin:
    file: Path
    line: int


def recipes_dir(project: Path | None = None) -> Path:
    return (project or project_dir()) / "recipes"


def recipe_names(project: Path | None = None) -> list[str]:
    """Buildable recipes; files starting with '_' are shared parents, not images."""
    directory = recipes_dir(project)
    if not directory.is_dir():
        return []
    return sorted((p.stem for p in directory.glob(f"*{RECIPE_SUFFIX}")
                   if not p.name.startswith("_")), key=natural_key)


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Numbers compared as numbers: rocm-6.4.4 < rocm-7.2.4 < rocm-7.14.1 < rocm-10.1.0."""
    return tuple((0, int(part)) if part.isdigit() else (1, part)
                 for part in re.split(r"(\d+)", name) if part)


def find_recipe(name_or_path: str, project: Path | None = None) -> Path:
    """A recipe name (a file in recipes/) or a path to a recipe file."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") and candidate.is_file():
        return candidate.resolve()
    path = recipes_dir(project) / f"{name_or_path}{RECIPE_SUFFIX}"
    if path.is_file():
        return path
    known = recipe_names(project)
    hint = difflib.get_close_matches(name_or_path, known, n=1)
    message = f"no recipe named {name_or_path!r} in {recipes_dir(project)}"
    if hint:
        message += f"; did you mean {hint[0]!r}?"
    elif known:
        message += f" (known: {', '.join(known)})"
    raise RecipeNotFound(message)


def load_recipe(name_or_path: str | Path, project: Path | None = None) -> Recipe:
    path = find_recipe(str(name_or_path), project)
    problems: list[Problem] = []
    chain = _load_chain(path, problems)
    if problems:
        raise RecipeError(problems)
    merged: dict[str, Any] = {}
    origins: dict[Path_, Origin] = {}
    for data, file_origins in reversed(chain):
        _merge(merged, data, ())
        origins.update(file_origins)
    sources = tuple(file_origins[()].file for _, file_origins in chain)
    recipe = _build(path, merged, origins, sources, problems)
    if problems:
        raise RecipeError(problems)
    assert recipe is not None
    return recipe


# --- loading ------------------------------------------------------------------------------

def _load_chain(path: Path, problems: list[Problem]) -> list[tuple[dict, dict[Path_, Origin]]]:
    """The recipe and its parents, child first; each validated on its own."""
    chain: list[tuple[dict, dict[Path_, Origin]]] = []
    seen: list[Path] = []
    current: Path | None = path
    while current is not None:
        if current in seen:
            cycle = " -> ".join(p.name for p in [*seen, current])
            problems.append(Problem(seen[-1], chain[-1][1][("extends",)].line, "extends",
                                    f"extends cycle: {cycle}"))
            break
        seen.append(current)
        loaded = _load_file(current, problems)
        if loaded is None:
            break
        data, origins = loaded
        _check_file(current, data, origins, problems)
        chain.append((data, origins))
        parent = data.get("extends")
        if not isinstance(parent, str) or not grammar.matches(grammar.EXTENDS, parent):
            break
        parent_path = current.parent / f"{parent.removesuffix(RECIPE_SUFFIX)}{RECIPE_SUFFIX}"
        if not parent_path.is_file():
            problems.append(Problem(current, origins[("extends",)].line, "extends",
                                    f"parent recipe {parent_path.name!r} not found beside "
                                    f"{current.name}"))
            break
        current = parent_path
    return chain


def _load_file(path: Path, problems: list[Problem]) -> tuple[dict, dict[Path_, Origin]] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(Problem(path, None, "", f"cannot read recipe: {exc}"))
        return None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        what = getattr(exc, "problem", None) or str(exc)
        problems.append(Problem(path, mark.line + 1 if mark else None, "",
                                f"invalid YAML: {what}"))
        return None
    if node is None or not isinstance(node, yaml.MappingNode):
        problems.append(Problem(path, 1, "", "a recipe must be a YAML mapping of keys to values"))
        return None
    origins: dict[Path_, Origin] = {(): Origin(path, 1)}
    data = node_to_python(node, path, (), origins, problems)
    return data, origins


def node_to_python(node: yaml.Node, file: Path, path: Path_, origins: dict[Path_, Origin],
                   problems: list[Problem]) -> Any:
    """A composed YAML node as plain data, recording the line of every key in ``origins``;
    non-string and duplicate keys become problems instead of being silently accepted."""
    origins.setdefault(path, Origin(file, node.start_mark.line + 1))
    if isinstance(node, yaml.MappingNode):
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            line = key_node.start_mark.line + 1
            if not isinstance(key, str) or key_node.tag != "tag:yaml.org,2002:str":
                problems.append(Problem(file, line, _dotted(path), "keys must be strings"))
                continue
            if key in result:
                problems.append(Problem(file, line, _dotted(path + (key,)),
                                        "duplicate key (YAML would silently keep the last one)"))
                continue
            origins[path + (key,)] = Origin(file, line)
            result[key] = node_to_python(value_node, file, path + (key,), origins, problems)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [node_to_python(item, file, path + (str(i),), origins, problems)
                for i, item in enumerate(node.value)]
    return yaml.safe_load(yaml.serialize(node)) if node.tag != "tag:yaml.org,2002:str" \
        else node.value


# --- per-file validation --------------------------------------------------------------------

def _check_file(file: Path, data: dict, origins: dict[Path_, Origin],
                problems: list[Problem]) -> None:
    if "version" not in data:
        problems.append(Problem(file, 1, "version",
                                f"missing; every recipe file starts with 'version: "
                                f"{spec.FORMAT_VERSION}'"))
    elif data["version"] != spec.FORMAT_VERSION and isinstance(data["version"], int) \
            and data["version"] > spec.FORMAT_VERSION:
        problems.append(Problem(file, origins[("version",)].line, "version",
                                f"recipe format {data['version']} is newer than this imagebuild "
                                f"reads ({spec.FORMAT_VERSION}); upgrade imagebuild"))
        return
    check_against_spec(recipe_spec(), data, (), file, origins, problems)


def check_against_spec(s: spec.Spec, value: Any, path: Path_, file: Path,
                       origins: dict[Path_, Origin], problems: list[Problem]) -> None:
    """Append a problem (file, line, dotted key, what was expected) for every place where
    ``value`` departs from the spec ``s``."""
    def problem(message: str, at: Path_ = path) -> None:
        origin = origins.get(at) or origins.get(path) or Origin(file, 0)
        problems.append(Problem(file, origin.line or None, _dotted(at), message))

    if value is None and getattr(s, "nullable", False):
        return
    if isinstance(s, spec.Obj):
        if not isinstance(value, dict):
            problem(f"expected {s.expected}, got {_describe(value)}")
            return
        for key, item in value.items():
            if key not in s.fields:
                hint = difflib.get_close_matches(key, list(s.fields), n=1)
                problem("unknown key" + (f"; did you mean {hint[0]!r}?" if hint else
                                         f" (allowed: {', '.join(s.fields)})"), path + (key,))
                continue
            check_against_spec(s.fields[key], item, path + (key,), file, origins, problems)
    elif isinstance(s, spec.Table):
        if not isinstance(value, dict):
            problem(f"expected {s.expected}, got {_describe(value)}")
            return
        for key, item in value.items():
            if s.key.pattern and not grammar.matches(s.key.pattern, key):
                problem(f"invalid key {key!r}: expected {s.key.expected}", path + (key,))
            elif item is not None:  # null removes an inherited entry
                check_against_spec(s.value, item, path + (key,), file, origins, problems)
    elif isinstance(s, spec.Seq):
        if not isinstance(value, list):
            problem(f"expected {s.expected}, got {_describe(value)}")
            return
        for i, item in enumerate(value):
            check_against_spec(s.item, item, path + (str(i),), file, origins, problems)
        if all(isinstance(v, (str, int, float, bool)) for v in value):
            duplicates = sorted({str(v) for v in value if value.count(v) > 1})
            if duplicates:
                problem(f"duplicate entries: {', '.join(duplicates)}")
    elif isinstance(s, spec.Bool):
        if not isinstance(value, bool):
            problem(f"expected {s.expected}, got {_describe(value)}")
    elif isinstance(s, spec.Int):
        if not isinstance(value, int) or isinstance(value, bool):
            problem(f"expected {s.expected} (an integer), got {_describe(value)}")
        elif s.enum and value not in s.enum:
            problem(f"expected one of {', '.join(map(str, s.enum))}, got {value}")
        elif s.minimum is not None and value < s.minimum:
            problem(f"expected {s.expected} (at least {s.minimum}), got {value}")
    elif isinstance(s, spec.Str):
        if value is None and s.nullable:
            return
        if not isinstance(value, str):
            quote = f'; quote it: "{value}"' if isinstance(value, (int, float)) \
                and not isinstance(value, bool) else ""
            problem(f"expected {s.expected}, got {_describe(value)}{quote}")
            return
        unsafe = grammar.text_problem(value)
        if unsafe:
            problem(f"{unsafe}: {value!r}")
        elif s.enum and value not in s.enum:
            hint = difflib.get_close_matches(value, list(s.enum), n=1)
            problem(f"expected {s.expected}, got {value!r}"
                    + (f"; did you mean {hint[0]!r}?" if hint else ""))
        elif s.pattern and not grammar.matches(s.pattern, value):
            why = s.explain(value) if s.explain else None
            problem(f"{value!r} {why}" if why else f"expected {s.expected}, got {value!r}")
        elif s.check and (why := s.check(value)):
            problem(f"{value!r} {why}")


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    return repr(value)


def _dotted(path: Path_) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out


# --- merging --------------------------------------------------------------------------------

def _merge(into: dict[str, Any], child: dict[str, Any], path: Path_) -> None:
    """Child values win; mappings merge key by key; lists and scalars are replaced.

    In tables (env, labels, wheels.packages) a null removes the inherited entry.
    """
    for key, value in child.items():
        if key == "extends" and not path:
            continue
        here = path + (key,)
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value, here)
        elif value is None and isinstance(lookup(path), spec.Table):
            into.pop(key, None)
        else:
            into[key] = _copy(value)


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return list(value)
    return value


def _with_defaults(merged: dict[str, Any]) -> dict[str, Any]:
    out = {k: _copy(v) for k, v in defaults().items()}
    _merge(out, merged, ())
    return out


# --- merged validation and construction ---------------------------------------------------

def _build(path: Path, merged: dict[str, Any], origins: dict[Path_, Origin],
           sources: tuple[Path, ...], problems: list[Problem]) -> Recipe | None:
    def problem(at: Path_, message: str) -> None:
        origin = origins.get(at) or origins.get(at[:-1]) or origins.get(at[:1]) or Origin(path, 0)
        problems.append(Problem(origin.file, origin.line or None, _dotted(at), message))

    for key in spec.CORE.required:
        if key not in merged:
            problem((key,), "missing (required in the recipe or a parent it extends)")
    if problems:
        return None
    data = _with_defaults(merged)
    # Not a default: the directory depends on the release line (rocm_layout).
    data.setdefault("rocm_prefix", system_prefix(data["rocm"]))
    for name, value in data["wheels"]["packages"].items():
        if value is None:
            problem(("wheels", "packages", name), "null here removes nothing inherited")
    if "torch" not in data["wheels"]["packages"]:
        problem(("wheels", "packages"), "must pin torch (the image exists to run it)")

    rocm = data["rocm"]
    rocm_wheels = data["rocm_from"] == "wheels"
    family = layout = None
    extras: tuple[str, ...] = ()
    index_url = data["wheels"].get("index_url")
    if rocm_wheels:
        layout, index_url = _wheels_layout(data, index_url)
        family, extras = _wheels_targets(data, layout, problem)
    elif rocm is not None and is_therock_line(rocm):
        _untested_checks(data, "a TheRock base image", problem)
    elif data["accept_untested_targets"]:
        problem(("accept_untested_targets",), "only applies to the TheRock lines (7.14.x, "
                "10.x); a packaged ROCm base image has its own support list")
    if index_url is None:
        if rocm is None:
            problem(("wheels", "index_url"),
                    "required for a CPU-only recipe (there is no ROCm release to derive it from)")
        index_url = ROCM_WHEELS_INDEX if rocm_wheels else RADEON_INDEX.format(rocm=rocm)
    if "{family}" in index_url:
        if not rocm_wheels:
            problem(("wheels", "index_url"), "{family} is only known when rocm_from is wheels")
        index_url = index_url.replace("{family}", family or "")

    sections = _component_rules(data, problem)
    if problems:
        return None

    pypi = data["wheels"].get("pypi", [])
    return Recipe(
        name=path.stem,
        path=path,
        format_version=data["version"],
        description=data["description"],
        rocm=rocm,
        base_image=data["base_image"],
        os_packages=tuple(data["os_packages"]),
        rocm_prefix=data["rocm_prefix"],
        build_packages=tuple(data["build_packages"]),
        sites=tuple(data["sites"]),
        python=data["python"],
        wheels=Wheels(
            index_url=index_url,
            pinned=tuple(sorted(data["wheels"]["packages"].items())),
            # The components' own requirements (Megatron's) are locked like every other wheel.
            extra=tuple(pypi) + tuple(
                r for c in components.registered() if c.name in sections
                and sections[c.name].enabled
                for r in c.requirements(sections[c.name]) if r not in pypi),
        ),
        gpu_targets=tuple(data["gpu_targets"]),
        env=tuple(data["env"].items()),
        labels=tuple(sorted(data["labels"].items())),
        dockerfile_syntax=data["dockerfile"]["syntax"],
        sources=sources,
        rocm_from=data["rocm_from"],
        gpu_family=family,
        wheel_layout=layout,
        device_extras=extras,
        accept_untested_targets=tuple(data["accept_untested_targets"]),
        components=sections,
        as_written={k: v for k, v in data.items() if k != "extends"},
    )


def _wheels_layout(data: dict[str, Any], index_url: str | None
                   ) -> tuple[WheelLayout, str | None]:
    """The layout of a ROCm-from-wheels recipe's index, and the index: ``{family}`` in
    wheels.index_url asks for the legacy per-family layout; otherwise the 7.14 and 10.x
    lines read their multi-arch index (the recipe's index_url, a mirror of it, or AMD's)."""
    rocm = data["rocm"] or ""
    if index_url is not None:
        return ("per-family" if "{family}" in index_url else "multi-arch"), index_url
    default = multi_arch_index(rocm)
    return ("multi-arch", default) if default else ("per-family", None)


def _wheels_targets(data: dict[str, Any], layout: WheelLayout,
                    problem: Callable[[Path_, str], None]) -> tuple[str | None, tuple[str, ...]]:
    """Checks of a recipe whose ROCm comes from wheels; returns its GPU family index
    (per-family layout) or the device extras of its targets (multi-arch)."""
    _wheels_checks(data, problem)
    _untested_checks(data, "rocm_from: wheels", problem)
    targets = data["gpu_targets"]
    try:
        if layout == "multi-arch":
            return None, device_extras(targets)
        return family_of(targets), ()
    except FamilyError as exc:
        problem(("gpu_targets",), f"rocm_from: wheels: {exc}")
        return None, ()


def _untested_checks(data: dict[str, Any], where: str,
                     problem: Callable[[Path_, str], None]) -> None:
    """gfx90a and the other targets TheRock does not release-test, unless accepted."""
    targets = data["gpu_targets"]
    for target in data["accept_untested_targets"]:
        if target not in targets:
            problem(("accept_untested_targets",),
                    f"{target} is not in gpu_targets ({', '.join(targets) or 'none'})")
    for why in untested(targets, data["accept_untested_targets"]):
        problem(("gpu_targets",), f"{where}: {why}; to build it anyway, list the target "
                "under accept_untested_targets")


def _wheels_checks(data: dict[str, Any], problem: Callable[[Path_, str], None]) -> None:
    """What a recipe whose ROCm comes from wheels cannot ask for."""
    if data["rocm"] is None:
        problem(("rocm_from",), "wheels needs rocm: the ROCm SDK version the wheels pin")
    if "rocm" in data["wheels"]["packages"]:
        problem(("wheels", "packages", "rocm"),
                "leave the selector out: the lock adds rocm[libraries]==<rocm> itself")


def _component_rules(data: dict[str, Any], problem: Callable[[Path_, str], None]
                     ) -> dict[str, Section]:
    """Each component's rules over its section when on, then its typed settings: every
    section that is on, and the first format's sections when off too."""
    sections: dict[str, Section] = {}
    builds = []
    for component in components.registered():
        section = data[component.name]
        if section.get("enabled"):
            component.rules(section, data, problem)
            if component.needs_build_packages:
                builds.append(component.name)
        if section.get("enabled") or component.always_recorded:
            sections[component.name] = component.read(section, data)
    if builds and not data["build_packages"]:
        problem((builds[0], "enabled"), "needs build_packages: the OS packages the source "
                "builds use (compilers, autotools, the ROCm development packages)")
    return sections


def load_all(project: Path | None = None) -> tuple[list[Recipe], list[RecipeError]]:
    """Every buildable recipe; broken ones are returned as errors, not raised."""
    recipes: list[Recipe] = []
    errors: list[RecipeError] = []
    for name in recipe_names(project):
        try:
            recipes.append(load_recipe(name, project))
        except RecipeError as exc:
            errors.append(exc)
    return recipes, errors
