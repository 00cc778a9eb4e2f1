"""`pip install .` runs every command: each third-party module the host package imports is a
core dependency, except the optional ones listed here, whose every import is guarded."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "imagebuild"
#: Optional modules: the extra that brings each, for output the command says it skipped.
OPTIONAL = {"matplotlib": "report",
            # tune's GPU steps run the in-image code with the host's own torch, if any
            "torch": "a GPU host's torch"}
#: Code that runs in the image's Python (standard library and torch only): the in-image
#: package, the render stage's build-time scripts and each component's build-time check.
IN_IMAGE = (PACKAGE / "inimage", PACKAGE / "render" / "scripts")


def runs_in_the_image(path: Path) -> bool:
    return any(folder in path.parents for folder in IN_IMAGE) or (
        path.name == "check.py" and path.parent.parent == PACKAGE / "components")


def imported_modules(source: str) -> dict[str, list[tuple[int, bool]]]:
    """Top-level module -> (line, guarded by ``except ImportError``) of every import."""
    found: dict[str, list[tuple[int, bool]]] = {}
    tree = ast.parse(source)
    guarded_lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError",
                                                                "ModuleNotFoundError")
                for h in node.handlers):
            for inner in node.body:
                guarded_lines.update(n.lineno for n in ast.walk(inner) if hasattr(n, "lineno"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        else:
            continue
        for name in names:
            found.setdefault(name.split(".")[0], []).append(
                (node.lineno, node.lineno in guarded_lines))
    return found


def core_dependencies() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}


def test_the_scan_sees_guarded_and_unguarded_imports() -> None:
    source = "import yaml\ndef f():\n    try:\n        import matplotlib\n    except ImportError:" \
             "\n        pass\n    from jsonschema import validators\n"
    assert imported_modules(source) == {"yaml": [(1, False)], "matplotlib": [(4, True)],
                                        "jsonschema": [(7, False)]}


def test_every_import_of_the_host_package_is_a_core_dependency_or_guarded() -> None:
    distributions = {module: {canonicalize_name(d) for d in dists}
                     for module, dists in packages_distributions().items()}
    core = core_dependencies()
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if runs_in_the_image(path):
            continue
        for module, sites in imported_modules(path.read_text()).items():
            if module in sys.stdlib_module_names or module in ("imagebuild", "__future__"):
                continue
            where = f"{path.relative_to(REPO)}:{sites[0][0]}"
            if module in OPTIONAL:
                problems += [f"{path.relative_to(REPO)}:{line}: {module} (extra "
                             f"{OPTIONAL[module]!r}) imported without an ImportError guard"
                             for line, guarded in sites if not guarded]
            elif not distributions.get(module, set()) & core:
                problems.append(f"{where}: {module} is not a core dependency in pyproject.toml "
                                f"(installed by {sorted(distributions.get(module, ())) or '?'})")
    assert not problems, "\n".join(problems)
