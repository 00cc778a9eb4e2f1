"""Node trees for the doctor's tests, built from the fixture folders: a node shape
(fixtures/nodes/<shape>: /sys and /proc as an MI250X, MI300A or MI300X node shows them),
then one case (fixtures/cases/<case>/case.json): the image's manifest, files changed or
removed, the job's environment, and real ELF libraries compiled into the tree."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.inimage.doctor.elf_kit import build_libfabric, build_library, build_plugin

FIXTURES = Path(__file__).with_name("fixtures")
CASES = sorted(p.name for p in (FIXTURES / "cases").iterdir())


@dataclass
class NodeCase:
    name: str
    root: Path
    manifest: dict[str, Any]
    env: dict[str, str]
    site: str | None
    in_image: bool
    expect: dict[str, str]


def build_case(name: str, directory: Path) -> NodeCase:
    case = json.loads((FIXTURES / "cases" / name / "case.json").read_text())
    root = directory / name
    shutil.copytree(FIXTURES / "nodes" / case["node"], root)
    for relative, text in case.get("tree", {}).items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text if text.endswith("\n") else text + "\n")
    for relative in case.get("remove", []):
        (root / relative).unlink()
    manifest = json.loads((FIXTURES / "images" / f"{case['image']}.json").read_text())
    (root / "opt/imagebuild").mkdir(parents=True, exist_ok=True)
    (root / "opt/imagebuild/manifest.json").write_text(json.dumps(manifest))
    for library in case.get("libraries", []):
        out = root / library["path"].lstrip("/")
        if "libfabric" in library:
            build_libfabric(out, library["libfabric"])
        elif "plugin_against" in library:
            build_plugin(out, root / library["plugin_against"].lstrip("/"),
                         tuple(library.get("needed", ())), tuple(library.get("exports", ())))
        else:
            build_library(out, out.name, library["needed"], library.get("runpath"))
    return NodeCase(name, root, manifest, case.get("env", {}), case.get("site"),
                    bool(case.get("in_image")), case["expect"])


@pytest.fixture(scope="session")
def node_cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, NodeCase]:
    """Every case's tree, built once per session (gcc runs a few dozen times)."""
    directory = tmp_path_factory.mktemp("doctor-nodes")
    return {name: build_case(name, directory) for name in CASES}
