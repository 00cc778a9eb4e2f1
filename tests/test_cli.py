"""The one error printer (imagebuild/cli.py) and the project a command works on."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from imagebuild.cli import main, report_error
from imagebuild.errors import ImagebuildError, StaleFile, TuneError
from imagebuild.project import project_dir

COMMANDS = Path(__file__).resolve().parents[1] / "imagebuild" / "commands"

_BROKEN = "version: 1\nrocm: 7.0.2\nbase_image: debian:bookworm\nwheels: {packages: {}}\n"


def test_commands_print_no_errors_themselves() -> None:
    """Only the handler prints `error:` and picks exit code 2: commands raise."""
    offenders = [f"{path.name}:{number}: {line.strip()}"
                 for path in sorted(COMMANDS.glob("*.py"))
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if re.search(r"""["']error:|\breturn 2\b|\\nhint:""", line)]
    assert offenders == []


def test_the_hint_is_printed_last_on_its_own_line(capsys: pytest.CaptureFixture[str]) -> None:
    report_error(ImagebuildError("it failed\ndetail", where="a.yaml:3", hint="do this"))
    assert capsys.readouterr().err.splitlines() == [
        "error: a.yaml:3: it failed", "  detail", "hint: do this"]
    report_error(StaleFile(["a: stale; run `x`", "b: missing; run `y`"]))
    assert capsys.readouterr().err.splitlines() == [
        "error: a: stale; run `x`", "error: b: missing; run `y`"]


def test_list_names_every_broken_recipe_through_the_handler(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "one.yaml").write_text(_BROKEN.replace("rocm: 7.0.2", "rocm: seven"))
    (recipes / "two.yaml").write_text(_BROKEN.replace("version: 1", "version: 9"))
    assert main(["-C", str(tmp_path), "list"]) == 2
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["RECIPE  ROCM  PYTHON  TORCH  GPU TARGETS  LOCK"]
    errors = captured.err.splitlines()
    assert len(errors) == 2 and all(line.startswith("error: ") for line in errors)
    assert "recipes/one.yaml:2: rocm: " in errors[0]
    assert "recipes/two.yaml:1: version: " in errors[1]


def test_lock_without_recipes_is_an_error_with_a_hint(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-C", str(tmp_path), "lock"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: name the recipes to lock (locking reaches the network)",
        "hint: `imagebuild lock --check` checks every lock offline"]


def test_project_is_passed_not_written_to_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("IMAGEBUILD_PROJECT", raising=False)
    monkeypatch.chdir(tmp_path)
    other = tmp_path / "other"
    (other / "recipes").mkdir(parents=True)
    (other / "recipes" / "x.yaml").write_text(_BROKEN.replace("rocm: 7.0.2", "rocm: bad"))
    assert main(["-C", str(other), "list"]) == 2
    assert "x.yaml" in capsys.readouterr().err
    assert "IMAGEBUILD_PROJECT" not in os.environ
    assert project_dir() == tmp_path.resolve()  # nothing chosen outlives the command
    monkeypatch.setenv("IMAGEBUILD_PROJECT", str(other))
    assert project_dir() == other.resolve()  # the documented default


def test_an_in_image_hint_becomes_the_hint_field(capsys: pytest.CaptureFixture[str]) -> None:
    """The in-image tuning code says its hint in the message (it cannot import errors.py);
    the host's error made from that message carries it over into ``hint``, printed last."""
    in_image = ValueError("trace.json: no GEMM\nhint: profile with record_shapes=True")
    error = TuneError(str(in_image))
    assert (error.message, error.hint) == ("trace.json: no GEMM", "profile with record_shapes=True")
    report_error(error)
    assert capsys.readouterr().err.splitlines() == [
        "error: trace.json: no GEMM", "hint: profile with record_shapes=True"]


@pytest.mark.parametrize("argv", [
    # before the lock is even read, so before any build, squash or file written
    ["build", "rocm-7.0.2", "--squash", "sqsh", "--site", "cscs-bevrin"],
    ["render", "rocm-7.0.2", "--stdout", "--site", "cscs-bevrin"],
])
def test_an_unknown_site_stops_a_command_before_its_work(
        argv: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")  # none may open
    code = main(["-C", str(Path(__file__).resolve().parents[1]), *argv])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    known = ", ".join(sorted(p.stem for p in (COMMANDS.parent / "data" / "sites").glob("*.yaml")))
    assert captured.err.splitlines()[0] == (
        "error: --site: no site profile 'cscs-bevrin'; did you mean 'cscs-beverin'? "
        f"(known: {known})")
    assert list(tmp_path.iterdir()) == []


def test_list_outside_a_project_is_an_error_not_an_empty_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("IMAGEBUILD_PROJECT", raising=False)
    assert main(["list"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[0] == f"error: no recipes in {tmp_path / 'recipes'}"
    assert main(["-C", str(tmp_path / "nonexistent"), "list"]) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"error: -C {tmp_path / 'nonexistent'}: no such directory")


def test_list_json_is_the_table_as_data(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    repo = Path(__file__).resolve().parents[1]
    assert main(["-C", str(repo), "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    names = {p.stem for p in (repo / "recipes").glob("*.yaml") if not p.stem.startswith("_")}
    assert sorted(r["recipe"] for r in rows) == sorted(names)
    # in release order, not string order: 10.x after 7.14.x after 7.2.x
    listed = [r["recipe"] for r in rows]
    assert listed.index("rocm-6.4.4") < listed.index("rocm-7.2.4") < \
        listed.index("rocm-7.14.1") < listed.index("rocm-10.1.0")
    assert all(set(r) == {"recipe", "rocm", "python", "torch", "gpu_targets", "lock"}
               for r in rows)


def test_sites_lists_the_shipped_profiles_and_the_projects_own(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    shipped = sorted(p.stem for p in (COMMANDS.parent / "data" / "sites").glob("*.yaml"))
    (tmp_path / "sites").mkdir()
    (tmp_path / "sites" / "mysite.yaml").write_text(
        "name: mysite\ndescription: a cluster of our own\ngpu: MI300X\n"
        "gpu_targets: [gfx942]\nformats: [sqsh]\n")
    assert main(["-C", str(tmp_path), "sites", "--json"]) == 0
    profiles = {p["site"]: p for p in json.loads(capsys.readouterr().out)}
    assert sorted(profiles) == sorted([*shipped, "mysite"])
    assert profiles["mysite"]["source"] == "sites/mysite.yaml"
    assert profiles["mysite"]["gpu_targets"] == ["gfx942"]
    assert main(["-C", str(tmp_path), "sites"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["SITE", "GPU", "TARGETS", "FORMATS", "NETWORK", "FROM"]
    assert any(line.startswith("mysite ") and "MI300X" in line for line in table)


def test_every_command_and_option_explains_itself_in_plain_text() -> None:
    """--help of every command and subcommand has a description, every option a help
    text, and no reStructuredText markup from the docstrings."""
    import argparse

    from imagebuild.cli import build_parser

    def parsers(parser: argparse.ArgumentParser, path: tuple[str, ...]):
        yield path, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from parsers(sub, (*path, name))

    problems = []
    for path, parser in parsers(build_parser(), ("imagebuild",)):
        command = " ".join(path)
        if not parser.description:
            problems.append(f"{command}: no description")
        problems += [f"{command} {a.option_strings or a.dest}: no help"
                     for a in parser._actions if not a.help and not isinstance(
                         a, (argparse._HelpAction, argparse._SubParsersAction))]
        if "``" in parser.format_help():
            problems.append(f"{command}: reStructuredText in --help")
    assert problems == []


def test_bash_completes_commands_and_their_options(tmp_path: Path) -> None:
    """The script `imagebuild completion bash` prints, sourced in a real bash."""
    import subprocess
    import sys

    script = tmp_path / "imagebuild.bash"
    done = subprocess.run([sys.executable, "-m", "imagebuild", "completion", "bash"],
                          capture_output=True, text=True, check=True)
    script.write_text(done.stdout)

    def complete(*words: str) -> list[str]:
        line = " ".join(words)
        program = (f'source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; '
                   f'COMP_LINE="{line}"; COMP_POINT=${{#COMP_LINE}}; _shtab_imagebuild; '
                   'printf "%s\\n" "${COMPREPLY[@]}"')
        return subprocess.run(["bash", "-c", program], capture_output=True, text=True,
                              check=True).stdout.split()

    assert complete("imagebuild", "bu") == ["build"]
    assert complete("imagebuild", "build", "--pl") == ["--plan"]
    assert "doctor" in complete("imagebuild", "")
