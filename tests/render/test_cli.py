"""`imagebuild render [RECIPE...] [--check|--stdout|--context DIR]`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from imagebuild.cli import main
from tests.render.conftest import SHIPPED


@pytest.fixture
def run(monkeypatch, capsys):
    def invoke(project: Path, *args: str) -> tuple[int, str, str]:
        monkeypatch.setenv("IMAGEBUILD_PROJECT", str(project))
        code = main(["-C", str(project), "render", *args])
        out, err = capsys.readouterr()
        return code, out, err
    return invoke


def test_render_writes_all_recipes_then_check_passes(project: Path, run):
    code, out, _ = run(project)
    assert code == 0
    assert out.splitlines() == [f"wrote dockerfiles/{n}/Dockerfile" for n in SHIPPED] + [
        f"wrote envs/{n}.toml" for n in SHIPPED]
    code, out, _ = run(project)
    assert out.splitlines() == [f"unchanged dockerfiles/{n}/Dockerfile" for n in SHIPPED] + [
        f"unchanged envs/{n}.toml" for n in SHIPPED]
    code, out, err = run(project, "--check")
    assert (code, err) == (0, "")
    assert out == f"{len(SHIPPED)} Dockerfile(s) and EDF file(s) up to date\n"


def test_check_guards_the_committed_edf(project: Path, run):
    run(project)
    edf = project / "envs" / "rocm-7.0.2.toml"
    edf.write_text(edf.read_text().replace('NCCL_PROTO = "^LL128"', 'NCCL_PROTO = "Simple"'))
    code, _, err = run(project, "--check")
    assert code == 2
    assert err.splitlines() == [("error: envs/rocm-7.0.2.toml: stale (differs from what its "
                                 "inputs generate now); run `imagebuild render rocm-7.0.2`")]


def test_check_fails_with_one_line_per_stale_or_missing_file(project: Path, run):
    run(project)
    (project / "dockerfiles" / "rocm-7.0.2" / "Dockerfile").write_text("FROM scratch\n")
    (project / "dockerfiles" / "rocm-6.4.4" / "Dockerfile").unlink()
    recipe = project / "recipes" / "rocm-7.1.1.yaml"
    recipe.write_text(recipe.read_text().replace("ref: rocm-7.1.1", "ref: rocm-7.1.2"))
    code, out, err = run(project, "--check")
    assert code == 2
    assert out == ""
    assert err.splitlines() == [
        "error: dockerfiles/rocm-6.4.4/Dockerfile: missing; run `imagebuild render rocm-6.4.4`",
        ("error: dockerfiles/rocm-7.0.2/Dockerfile: stale (differs from what its inputs "
        "generate now); run `imagebuild render rocm-7.0.2`"),
        ("error: dockerfiles/rocm-7.1.1/Dockerfile: stale (differs from what its inputs "
        "generate now); run `imagebuild render rocm-7.1.1`"),
    ]
    # Checking never writes.
    assert (project / "dockerfiles" / "rocm-7.0.2" / "Dockerfile").read_text() == "FROM scratch\n"


def test_check_of_named_recipes_only(project: Path, run):
    run(project, "rocm-7.0.2")
    assert run(project, "--check", "rocm-7.0.2")[0] == 0
    assert run(project, "--check", "rocm-6.4.4")[0] == 2


def test_check_reports_dockerfiles_without_a_recipe(project: Path, run):
    run(project)
    orphan = project / "dockerfiles" / "rocm-5.7.1" / "Dockerfile"
    orphan.parent.mkdir()
    orphan.write_text("FROM scratch\n")
    code, _, err = run(project, "--check")
    assert code == 2
    assert err == ("error: dockerfiles/rocm-5.7.1/Dockerfile: no recipe recipes/rocm-5.7.1.yaml "
                   "renders it; delete it\n")


def test_a_locked_recipe_renders_from_its_lock(cpu_project: Path, run):
    code, out, _ = run(cpu_project, "--stdout", "cpu-test")
    assert code == 0
    assert out == (cpu_project / "dockerfiles" / "cpu-test" / "Dockerfile").read_text()
    assert "@sha256:" in out.split("AS base", 1)[0]


def test_stale_lock_is_an_error_naming_the_fix(cpu_project: Path, run):
    recipe = cpu_project / "recipes" / "cpu-test.yaml"
    recipe.write_text(recipe.read_text().replace('python: "3.11"', 'python: "3.12"'))
    code, _, err = run(cpu_project, "cpu-test")
    assert code == 2
    assert err == ("error: recipes/pylock.cpu-test.toml: stale (recipe cpu-test changed since "
                   "it was locked); run `imagebuild lock cpu-test`\n")


def test_context_stages_a_buildable_directory(cpu_project: Path, tmp_path: Path, run):
    code, out, _ = run(cpu_project, "cpu-test", "--context", str(tmp_path / "ctx"))
    assert code == 0
    assert re.match(r"staged \d+ files in .*; build with: DOCKER_BUILDKIT=1 docker build", out)
    assert (tmp_path / "ctx" / "Dockerfile").read_text() == \
        (cpu_project / "dockerfiles" / "cpu-test" / "Dockerfile").read_text()


def test_context_of_an_unlocked_recipe_is_refused(project: Path, tmp_path: Path, run):
    code, _, err = run(project, "rocm-7.0.2", "--context", str(tmp_path / "ctx"))
    assert code == 2
    assert err.startswith("error: rocm-7.0.2: not locked; run `imagebuild lock rocm-7.0.2`")


def test_unknown_recipe_is_one_clear_line(project: Path, run):
    code, _, err = run(project, "rocm-7.0.3")
    assert code == 2
    assert err == (f"error: no recipe named 'rocm-7.0.3' in {project / 'recipes'}; "
                   "did you mean 'rocm-7.0.2'?\n")


def test_stdout_and_context_take_one_recipe(project: Path, run):
    code, _, err = run(project, "--stdout")
    assert code == 2 and "exactly one recipe" in err


def test_render_defaults_to_the_site_every_other_command_defaults_to(
        project: Path, run, monkeypatch: pytest.MonkeyPatch) -> None:
    """$IMAGEBUILD_SITE is the default --site of render as of build, squash, validate and
    doctor: envs/ is rendered (and checked) for the site the rest of the run uses."""
    from imagebuild.cli import build_parser

    monkeypatch.setenv("IMAGEBUILD_SITE", "lumi")
    for command in (["render"], ["build", "r"], ["squash", "r"], ["validate", "r"],
                    ["doctor", "r"], ["tune", "edf", "b", "r"]):
        assert build_parser(command).parse_args(command).site == "lumi", command
    code, out, _ = run(project, "rocm-7.0.2")
    assert code == 0 and "wrote envs/rocm-7.0.2.toml" in out
    edf = (project / "envs" / "rocm-7.0.2.toml").read_text()
    assert "imagebuild render rocm-7.0.2 --site lumi" in edf
    assert run(project, "--check", "rocm-7.0.2")[0] == 0
    monkeypatch.delenv("IMAGEBUILD_SITE")  # the committed default: cscs-beverin
    assert build_parser(["render"]).parse_args(["render"]).site == "cscs-beverin"
    code, _, err = run(project, "--check", "rocm-7.0.2")
    assert code == 2 and "envs/rocm-7.0.2.toml" in err
    monkeypatch.setenv("IMAGEBUILD_SITE", "summit")  # an unknown one is refused
    code, out, err = run(project, "--stdout", "rocm-7.0.2")
    assert code == 2 and out == "" and "no site profile 'summit'" in err
