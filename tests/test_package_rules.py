"""The package's layering, read from its source: one place opens a container engine, and
the stages before the engine do not import it; the image components live in their folders
(imagebuild/components/<name>/), each importing only the base layer, the models and its own
folder, and the stages reach them through the registry alone; the build-time scripts share
one helper module; no module is over the line limit. tests/support/package_counts.py prints
the counts these rules hold down."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from imagebuild.render.layout import SCRIPT_HELPERS
from tests.support.package_counts import (
    MODULE_LINE_LIMIT,
    build_scripts,
    component_switches,
    duplicated_helpers,
    long_modules,
)
from tests.test_core_install import imported_modules

PACKAGE = Path(__file__).resolve().parents[1] / "imagebuild"
#: The only folder that may create a docker SDK client.
ENGINE = PACKAGE / "engine"
#: Stages that never talk to a container engine (they may use imagebuild.process and
#: imagebuild.images, the base layer).
ENGINE_FREE = ("lock", "ci", "recipe", "render")
#: docker SDK names that open a connection to a daemon.
CLIENT_FACTORIES = {"from_env", "DockerClient", "APIClient"}


def docker_clients_made(source: str) -> list[int]:
    """Lines that create a docker SDK client: ``docker.from_env()``,
    ``docker.DockerClient(...)``, or those names imported from ``docker``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Attribute) and node.attr in CLIENT_FACTORIES
                and isinstance(node.value, ast.Name) and node.value.id == "docker") or isinstance(node, ast.ImportFrom) and node.module and \
                node.module.split(".")[0] == "docker" and \
                any(alias.name in CLIENT_FACTORIES for alias in node.names):
            lines.append(node.lineno)
    return lines


def engine_imports(source: str) -> list[int]:
    """Lines importing imagebuild.engine (any module of it), at any depth of the file."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        if any(name == "imagebuild.engine" or name.startswith("imagebuild.engine.")
               for name in names):
            lines.append(node.lineno)
    return lines


def _modules(root: Path) -> list[Path]:
    return sorted(root.rglob("*.py"))


def test_the_rules_see_what_they_forbid() -> None:
    assert docker_clients_made("import docker\nclient = docker.from_env()\n") == [2]
    assert docker_clients_made("import docker\nc = docker.DockerClient(base_url='x')\n") == [2]
    assert docker_clients_made("def f():\n    from docker import from_env\n") == [2]
    assert docker_clients_made("import docker\nerrors = docker.errors\n") == []
    assert engine_imports("def f():\n    from imagebuild.engine.select import open_engine\n") \
        == [2]
    assert engine_imports("from imagebuild import engine\n") == [1]
    assert engine_imports("import imagebuild.engine.docker\n") == [1]
    assert engine_imports("from imagebuild.process import CommandRunner\n"
                          "from imagebuild.images import split_reference\n") == []


def test_only_the_engine_creates_a_docker_client() -> None:
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}"
             for path in _modules(PACKAGE) if ENGINE not in path.parents
             for line in docker_clients_made(path.read_text())]
    assert not found, "a docker SDK client outside imagebuild/engine (open one with " \
                      "imagebuild.engine.select.open_engine): " + ", ".join(found)
    assert any(docker_clients_made(path.read_text()) for path in _modules(ENGINE))


def test_stages_before_the_engine_do_not_import_it() -> None:
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}"
             for stage in ENGINE_FREE for path in _modules(PACKAGE / stage)
             for line in engine_imports(path.read_text())]
    assert not found, "imagebuild.engine imported by " + ", ".join(found) + \
                      " (the process runner and image references are imagebuild.process " \
                      "and imagebuild.images)"


# --- image components -----------------------------------------------------------------------

COMPONENTS = PACKAGE / "components"
#: The base layer every stage may import (docs/architecture.md, "Base layer").
BASE_LAYER = frozenset({"imagebuild", "imagebuild.errors", "imagebuild.files", "imagebuild.http",
                        "imagebuild.process", "imagebuild.images", "imagebuild.project",
                        "imagebuild.generated"})
#: The recipe modules that read the registry (a component importing them would import itself).
RECIPE_WITH_REGISTRY = frozenset({"imagebuild.recipe.load", "imagebuild.recipe.format"})
#: What the components have in common, besides the registry: the protocol and its helpers.
COMPONENTS_COMMON = frozenset({"imagebuild.components.protocol", "imagebuild.components.shared"})
#: The stages that loop over the registry and never name a component's own modules.
LOOPING_STAGES = ("recipe", "lock", "render", "convert")


def imagebuild_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of every import of an imagebuild module, at any depth: ``from X import
    Y`` counts as X.Y where that is a module of the package, else as X."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                found.append((node.lineno, name if _is_module(name) else node.module))
    return [(line, name) for line, name in found
            if name == "imagebuild" or name.startswith("imagebuild.")]


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def component_may_import(component: str, module: str) -> bool:
    """A component's modules import the base layer, the recipe and lock models, the
    components' common modules and their own folder: never another component, the registry
    or a stage."""
    return (module in BASE_LAYER or module in COMPONENTS_COMMON
            or module == "imagebuild.lock.model"
            or (module.startswith("imagebuild.recipe.") and module not in RECIPE_WITH_REGISTRY)
            or module.startswith(f"imagebuild.components.{component}."))


def stage_may_import(module: str) -> bool:
    """recipe/, lock/, render/ and convert/ reach the components through the registry."""
    return not module.startswith("imagebuild.components.") or module in (
        "imagebuild.components.protocol",)


def _component_names() -> frozenset[str]:
    from imagebuild.components import registered

    return frozenset(c.name for c in registered())


#: Where a recipe, a lock and a plan keep the components' parts.
HOLDERS = frozenset({"components", "parts", "sources"})


def component_reads(source: str, names: frozenset[str]) -> list[int]:
    """Lines reading a component's part by its name: an attribute named after one
    (``recipe.hipblaslt``) or its key in a holder of the parts (``plan.parts["hipblaslt"]``,
    ``recipe.components.get("megatron")``)."""
    lines = set()
    for node in ast.walk(ast.parse(source)):
        key: ast.AST | None = None
        if isinstance(node, ast.Subscript) and _holder(node.value):
            key = node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "get" and _holder(node.func.value) and node.args:
            key = node.args[0]
        named = isinstance(key, ast.Constant) and key.value in names
        if named or (isinstance(node, ast.Attribute) and node.attr in names):
            lines.add(node.lineno)
    return sorted(lines)


def _holder(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr in HOLDERS) or (
        isinstance(node, ast.Name) and node.id in HOLDERS)


def template_reads(text: str, names: frozenset[str]) -> list[int]:
    """Lines of a Jinja template whose tags name a component."""
    tags = re.compile(r"{{.*?}}|{%.*?%}")
    words = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
    return [number for number, line in enumerate(text.splitlines(), 1)
            if any(names & set(words.findall(tag)) for tag in tags.findall(line))]


def _component_modules() -> list[tuple[str, Path]]:
    """(component, module) of each component's Python modules; its build-time check, a
    script run in the image, apart."""
    return [(path.relative_to(COMPONENTS).parts[0], path)
            for path in _modules(COMPONENTS)
            if len(path.relative_to(COMPONENTS).parts) > 1 and path.name != "check.py"]


def test_the_component_rules_see_what_they_forbid() -> None:
    assert imagebuild_imports("from imagebuild import components\nimport imagebuild.errors\n"
                              "def f():\n    from imagebuild.render.plan import BuildPlan\n") \
        == [(1, "imagebuild.components"), (2, "imagebuild.errors"), (4, "imagebuild.render.plan")]
    assert component_may_import("megatron", "imagebuild.recipe.spec")
    assert component_may_import("megatron", "imagebuild.components.megatron.component")
    assert not component_may_import("megatron", "imagebuild.components.hipblaslt.component")
    assert not component_may_import("megatron", "imagebuild.components")
    assert not component_may_import("megatron", "imagebuild.render.layout")
    assert not component_may_import("megatron", "imagebuild.lock.check")
    assert stage_may_import("imagebuild.components") and not stage_may_import(
        "imagebuild.components.rccl_tuner.component")
    names = frozenset({"hipblaslt", "rccl_tuner"})
    assert component_reads("x = recipe.hipblaslt.enabled\ny = plan.parts['rccl_tuner']\n"
                           "z = site.network.plugin\nw = jobs['hipblaslt']\n"
                           "v = recipe.components.get('rccl_tuner')\n", names) == [1, 2, 5]
    assert template_reads("{% if hipblaslt %}\nhipblaslt text\n{{ rccl_tuner.prefix }}\n",
                          names) == [1, 3]


def test_components_import_only_the_base_layer_the_models_and_their_own_folder() -> None:
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}: {module}"
             for component, path in _component_modules()
             for line, module in imagebuild_imports(path.read_text())
             if not component_may_import(component, module)]
    assert not found, "a component imports beyond the base layer, the recipe and lock " \
                      "models, the components' protocol and its own folder:\n" + "\n".join(found)


def test_the_stages_that_loop_over_the_registry_import_no_component() -> None:
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}: {module}"
             for stage in LOOPING_STAGES for path in _modules(PACKAGE / stage)
             for line, module in imagebuild_imports(path.read_text())
             if not stage_may_import(module)]
    assert not found, "import the registry (imagebuild.components) instead:\n" + \
                      "\n".join(found)


def test_convert_imports_neither_the_plan_nor_the_lock_check() -> None:
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}: {module}"
             for path in _modules(PACKAGE / "convert")
             for line, module in imagebuild_imports(path.read_text())
             if module in ("imagebuild.render.plan", "imagebuild.lock.check")]
    assert not found, "convert takes what it lists as data (imagebuild.build.inventory):\n" + \
                      "\n".join(found)


def test_no_stage_reads_a_components_part_by_its_name() -> None:
    """Recipe, Lock and BuildPlan hold the components' parts in one mapping each; outside
    the component folders (and the in-image package, which reads the manifest), nothing
    reads one by name, and no core template names one."""
    names = _component_names()
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}"
             for path in _modules(PACKAGE)
             if COMPONENTS not in path.parents and PACKAGE / "inimage" not in path.parents
             for line in component_reads(path.read_text(), names)]
    found += [f"{path.relative_to(PACKAGE.parent)}:{line}"
              for path in sorted((PACKAGE / "render" / "templates").glob("*.j2"))
              for line in template_reads(path.read_text(), names)]
    assert not found, "a component's part read by name outside its folder (use the " \
                      "component's accessor, or loop over the registry): " + ", ".join(found)


def test_few_lines_outside_the_components_ask_whether_one_is_on() -> None:
    """What remains asks for a reason of its own (the tuning side's hipBLASLt, the doctor's
    network plugin), through the component's accessor."""
    switches = component_switches(PACKAGE.parent)
    count = sum(map(len, switches.values()))
    assert count <= 10, f"{count} lines ask whether a component is on: {switches}"


def test_the_build_time_scripts_share_their_helpers() -> None:
    """Each script the build runs is staged with the one helper module; none defines a
    helper of another script again, and they import only the standard library and it."""
    scripts = build_scripts(PACKAGE.parent)
    assert len(scripts) >= 8 and SCRIPT_HELPERS in scripts
    assert duplicated_helpers(scripts) == {}
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}: {name}"
             for path in scripts
             for name, sites in imported_modules(path.read_text()).items()
             for line, guarded in sites
             if name not in sys.stdlib_module_names and name not in ("__future__", "buildtime")
             and not guarded]
    assert not found, "build-time scripts run in the image: standard library only (or an " \
                      "import guarded by except ImportError):\n" + "\n".join(found)


def test_no_module_is_over_the_line_limit() -> None:
    long = long_modules(PACKAGE.parent)
    assert not long, f"over {MODULE_LINE_LIMIT} lines (split it along its seams): {long}"
