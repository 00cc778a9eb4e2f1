"""validate/ and tune/ do not import each other: each may import the in-image package
(imagebuild.inimage) and the base layer, and the validate command joins them (it hands
tune's bundle binds and environment to validate as plain options)."""

from __future__ import annotations

import ast
from pathlib import Path

import imagebuild

PACKAGE = Path(imagebuild.__file__).resolve().parent


def _imported(path: Path, root: Path) -> set[str]:
    """Absolute names of every module ``path`` (inside package ``root``) imports, relative
    imports resolved, each ``from X import y`` counted as X and X.y."""
    here = [root.name, *path.relative_to(root).parent.parts]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = here[:len(here) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names |= {module, *(f"{module}.{alias.name}" for alias in node.names)}
    return names


def offenders(root: Path, folder: str, forbidden: str) -> list[str]:
    """``file: module`` for each import of ``forbidden`` (or below it) in root/folder."""
    return [f"{path.relative_to(root.parent)}: {name}"
            for path in sorted((root / folder).rglob("*.py"))
            for name in sorted(_imported(path, root))
            if name == forbidden or name.startswith(forbidden + ".")]


def test_validate_does_not_import_tune() -> None:
    assert offenders(PACKAGE, "validate", "imagebuild.tune") == []


def test_tune_does_not_import_validate() -> None:
    assert offenders(PACKAGE, "tune", "imagebuild.validate") == []


def test_doctor_and_validate_do_not_import_each_other() -> None:
    """The validate command joins them (validate runs the doctor first)."""
    assert offenders(PACKAGE, "validate", "imagebuild.doctor") == []
    assert offenders(PACKAGE, "doctor", "imagebuild.validate") == []
    assert offenders(PACKAGE, "doctor", "imagebuild.tune") == []


def test_the_rule_sees_relative_and_absolute_imports(tmp_path: Path) -> None:
    root = tmp_path / "imagebuild"
    (root / "tune" / "sub").mkdir(parents=True)
    (root / "tune" / "a.py").write_text("from ..validate import host\n")
    (root / "tune" / "sub" / "b.py").write_text("import imagebuild.validate.target\n"
                                                 "from . import c\nfrom ..x import y\n")
    assert offenders(root, "tune", "imagebuild.validate") == [
        "imagebuild/tune/a.py: imagebuild.validate",
        "imagebuild/tune/a.py: imagebuild.validate.host",
        "imagebuild/tune/sub/b.py: imagebuild.validate.target"]
    assert offenders(root, "tune", "imagebuild.tune.x") == [
        "imagebuild/tune/sub/b.py: imagebuild.tune.x",
        "imagebuild/tune/sub/b.py: imagebuild.tune.x.y"]
