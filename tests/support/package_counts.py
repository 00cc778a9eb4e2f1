"""Counts of how the package is laid out, read from its source: what the component rules in
tests/test_package_rules.py hold down, and what a change to the layout reports.

    .venv/bin/python -m tests.support.package_counts [REPOSITORY] [--lines]

prints each count (``--lines``: and the places behind it) for a checkout, so that two
checkouts (before and after a change) are compared with the same code. The counts:

- switches: lines outside ``imagebuild/components/`` and the in-image package that ask
  whether a named image component is on: a read of its section's ``enabled`` (attribute,
  ``.get("enabled")`` or ``["enabled"]`` of an expression naming the component:
  ``recipe.hipblaslt.enabled``, ``hip.get("enabled")``), a test (``if``, a conditional
  expression, a comprehension's condition, ``and``/``or``) on a component's settings, plan
  or pins (``plan.hipblaslt is None``, ``if lock.megatron``, ``if tuner``), and a Jinja
  ``{% if %}`` naming one. The registry's own loops (``components.enabled(recipe)``) name
  no component;
- tuner files: host files (Python and templates outside the in-image package, the
  tuner's own folder and the registry) that name the RCCL tuner;
- switchboards: the line counts of the modules that held a switch over every component;
- duplicated check helpers: functions defined in more than one build-time script (the
  scripts the build context stages), other than ``main`` and the mode functions ``main``
  hands the parsed arguments to;
- long modules: Python modules over the line limit.
"""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: Longest module the package keeps (docs/architecture.md: small modules with one job).
MODULE_LINE_LIMIT = 450

#: The components' recipe sections, and the names the stages gave their parts (the plan's
#: ``plugin``, the lock's ``libfabric``) and their local aliases (``hip``, ``tuner``, ...).
COMPONENT_NAMES = frozenset({"hipblaslt", "network_plugin", "megatron", "rccl_tests",
                             "rccl_tuner", "transformer_engine", "plugin", "libfabric"})
ALIASES = frozenset({"hip", "tuner", "tests"})
#: Names a section is also held under where only its ``enabled`` is read (``engine``:
#: TransformerEngine's section in the loader; never a container engine's flag).
ENABLED_ALIASES = frozenset({"engine"})
#: Roots of an attribute chain that hold a recipe, a lock, a plan or their inputs.
HOLDERS = frozenset({"recipe", "lock", "plan", "self", "inputs", "r", "data"})

#: The modules that held a switch over every component, by path in the repository.
SWITCHBOARDS = ("imagebuild/recipe/load.py", "imagebuild/render/context.py",
                "imagebuild/render/templates/final.j2", "imagebuild/render/plan.py",
                "imagebuild/recipe/spec.py", "imagebuild/lock/resolve.py",
                "imagebuild/render/dockerfile.py", "imagebuild/recipe/model.py",
                "imagebuild/render/layout.py")

TUNER_WORDS = re.compile(r"rccl[_-]tuner|RcclTuner|RCCL_TUNER|tuner[-_]plugin|TUNER_PLUGIN|"
                         r"TUNER_CONFIG|ncclTunerPlugin")
_JINJA_TEST = re.compile(r"{%-?\s*(?:if|elif)\s+([^%]*)%}")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _outside_components(repo: Path) -> Iterator[Path]:
    """The package's Python modules and templates outside imagebuild/components/ and the
    in-image package."""
    package = repo / "imagebuild"
    for path in sorted(package.rglob("*")):
        parts = path.relative_to(package).parts
        if path.suffix in (".py", ".j2") and path.is_file() and parts[0] not in (
                "components", "inimage") and "__pycache__" not in parts:
            yield path


def _root(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _names_a_component(node: ast.AST) -> bool:
    """A component's settings, plan or pins: ``plan.plugin``, ``lock.megatron``, or a bare
    name of one (``megatron``, ``tuner``); a comparison only when with None (``is None``),
    not with a string or a set of a site's choices."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Compare) and not all(
                isinstance(c, ast.Constant) and c.value is None for c in inner.comparators):
            return False
        if isinstance(inner, ast.Attribute) and inner.attr in COMPONENT_NAMES \
                and _root(inner) in HOLDERS:
            return True
        if isinstance(inner, ast.Name) and inner.id in (COMPONENT_NAMES | ALIASES) - {
                "libfabric"}:
            return True
    return False


def _words(node: ast.AST) -> set[str]:
    """The names, attributes and string keys an expression is made of."""
    words: set[str] = set()
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name):
            words.add(inner.id)
        elif isinstance(inner, ast.Attribute):
            words.add(inner.attr)
        elif isinstance(inner, ast.Constant) and isinstance(inner.value, str):
            words.add(inner.value)
    return words


def _reads_enabled(node: ast.AST, calls: set[int]) -> bool:
    """A read of the ``enabled`` of an expression naming a component (not a call of a
    function named ``enabled``, such as the registry's)."""
    base: ast.AST | None = None
    if isinstance(node, ast.Attribute) and node.attr == "enabled" and id(node) not in calls:
        base = node.value
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "get" and node.args \
            and isinstance(node.args[0], ast.Constant) and node.args[0].value == "enabled":
        base = node.func.value
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
            and node.slice.value == "enabled":
        base = node.value
    return base is not None and bool(
        _words(base) & (COMPONENT_NAMES | ALIASES | ENABLED_ALIASES))


def python_switches(source: str) -> set[int]:
    """Lines of ``source`` that ask whether a component is on."""
    lines: set[int] = set()
    tree = ast.parse(source)
    calls = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    for node in ast.walk(tree):
        if _reads_enabled(node, calls):
            lines.add(node.lineno)
        tests: list[ast.expr] = []
        if isinstance(node, (ast.If, ast.IfExp, ast.While)):
            tests.append(node.test)
        elif isinstance(node, ast.comprehension):
            tests += node.ifs
        elif isinstance(node, ast.BoolOp):
            tests += node.values
        for test in tests:
            if _names_a_component(test):
                lines.update(range(test.lineno, (test.end_lineno or test.lineno) + 1))
    return lines


def template_switches(text: str) -> set[int]:
    """Lines of a Jinja template whose ``{% if %}``/``{% elif %}`` names a component."""
    names = COMPONENT_NAMES | ALIASES
    return {number for number, line in enumerate(text.splitlines(), 1)
            if any(names & set(_WORD.findall(test)) for test in _JINJA_TEST.findall(line))}


def component_switches(repo: Path = REPO) -> dict[str, list[int]]:
    """File (relative to ``repo``) -> the lines in it that switch on a component."""
    found: dict[str, list[int]] = {}
    for path in _outside_components(repo):
        text = path.read_text(encoding="utf-8")
        lines = python_switches(text) if path.suffix == ".py" else template_switches(text)
        if lines:
            found[str(path.relative_to(repo))] = sorted(lines)
    return found


def tuner_files(repo: Path = REPO) -> list[str]:
    """Host files outside the tuner's own folder that name the RCCL tuner; the registry
    (imagebuild/components/__init__.py), which lists every component once by design, aside."""
    own = repo / "imagebuild" / "components" / "rccl_tuner"
    package = repo / "imagebuild"
    registry = package / "components" / "__init__.py"
    return [str(path.relative_to(repo)) for path in sorted(package.rglob("*"))
            if path.suffix in (".py", ".j2") and path.is_file() and path != registry
            and "inimage" not in path.relative_to(package).parts
            and own not in path.parents and "__pycache__" not in path.parts
            and TUNER_WORDS.search(path.read_text(encoding="utf-8"))]


def switchboard_lines(repo: Path = REPO) -> dict[str, int]:
    return {name: len((repo / name).read_text(encoding="utf-8").splitlines())
            for name in SWITCHBOARDS if (repo / name).is_file()}


def build_scripts(repo: Path = REPO) -> list[Path]:
    """The scripts a build context stages for the build to run: render/templates' *.py
    before the components had folders, each component's check and the render stage's own
    scripts after."""
    package = repo / "imagebuild"
    scripts = sorted((package / "render" / "templates").glob("*.py"))
    scripts += sorted((package / "render" / "scripts").glob("*.py"))
    scripts += sorted((package / "components").glob("*/check.py"))
    return [path for path in scripts if path.name != "__init__.py"]


def _mode_functions(tree: ast.Module) -> set[str]:
    """``main`` and the functions it calls with the parsed arguments (``stage(args)``)."""
    modes = {"main"}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "main":
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) \
                        and any(isinstance(a, ast.Name) and a.id == "args" for a in call.args):
                    modes.add(call.func.id)
    return modes


def duplicated_helpers(scripts: list[Path]) -> dict[str, list[str]]:
    """Function name -> the scripts defining it, for names defined in more than one."""
    defined: dict[str, list[str]] = {}
    for path in scripts:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modes = _mode_functions(tree)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name not in modes:
                defined.setdefault(node.name, []).append(path.name if path.name != "check.py"
                                                         else f"{path.parent.name}/check.py")
    return {name: paths for name, paths in sorted(defined.items()) if len(paths) > 1}


def long_modules(repo: Path = REPO, limit: int = MODULE_LINE_LIMIT) -> dict[str, int]:
    package = repo / "imagebuild"
    found = {}
    for path in sorted(package.rglob("*.py")):
        count = len(path.read_text(encoding="utf-8").splitlines())
        if count > limit:
            found[str(path.relative_to(repo))] = count
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repository", nargs="?", type=Path, default=REPO)
    parser.add_argument("--lines", action="store_true", help="also print the places")
    args = parser.parse_args()
    repo = args.repository.resolve()
    switches = component_switches(repo)
    print(f"switches: {sum(map(len, switches.values()))} lines in {len(switches)} files")
    if args.lines:
        for name, lines in switches.items():
            print(f"  {name}: {', '.join(map(str, lines))}")
    tuner = tuner_files(repo)
    print(f"tuner files: {len(tuner)}" + (f" ({', '.join(tuner)})" if args.lines else ""))
    boards = switchboard_lines(repo)
    print(f"switchboards: {sum(boards.values())} lines in {len(boards)} files"
          + (f" ({', '.join(f'{k} {v}' for k, v in boards.items())})" if args.lines else ""))
    helpers = duplicated_helpers(build_scripts(repo))
    print(f"duplicated check helpers: {len(helpers)}"
          + "".join(f"\n  {name}: {', '.join(paths)}" for name, paths in helpers.items()))
    long = long_modules(repo)
    print(f"modules over {MODULE_LINE_LIMIT} lines: {len(long)}"
          + "".join(f"\n  {name}: {count}" for name, count in long.items()))


if __name__ == "__main__":
    main()
