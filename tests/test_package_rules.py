"""The package's layering, read from its source: one place opens a container engine, and
the stages before the engine do not import it."""

from __future__ import annotations

import ast
from pathlib import Path

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
