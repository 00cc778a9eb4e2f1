"""Every `imagebuild ...` command line in the generated pipelines parses with the real CLI,
so a renamed option fails here and not on a GPU runner hours into a build."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from imagebuild.ci.generate import generated_files
from imagebuild.cli import build_parser

from .test_config import write_config
from .test_linters import CONFIGS

#: Shell values the generated scripts use, as a runner would expand them.
EXPANSIONS = {'"$RECIPE"': "rocm-7.0.2", '"$BASE"': "0" * 40, '"$REQUESTED"': "''",
              '"${cache_args[@]}"': "--cache-from registry.example.org/hpc/x/imagebuild-cache "
                                    "--cache-to registry.example.org/hpc/x/imagebuild-cache",
              '"$IMAGEBUILD_REGISTRY"': "registry.example.org/hpc/x",
              '"$image"': "registry.example.org/hpc/x/imagebuild/rocm-7.0.2@sha256:" + "0" * 64,
              '"$canonical"': "registry.example.org/hpc/x/imagebuild/rocm-7.0.2:0123456789ab",
              '"$STABLE_TAG"': "2025.06"}
SUBCOMMANDS = ["ci", "lock", "render", "build", "validate", "squash", "promote"]


def scripts(data: object) -> list[str]:
    """Every shell script in a parsed pipeline: GitHub `run`, GitLab `script` lists."""
    out: list[str] = []
    if isinstance(data, dict):
        for key, value in data.items():
            if key == "run" and isinstance(value, str):
                out.append(value)
            elif key in ("script", "before_script") and isinstance(value, list):
                out += [line for line in value if isinstance(line, str)]
            else:
                out += scripts(value)
    elif isinstance(data, list):
        for item in data:
            out += scripts(item)
    return out


def command_lines(text: str) -> list[list[str]]:
    """The argv of every imagebuild invocation in a generated file's scripts."""
    commands = []
    for script in scripts(yaml.safe_load(text)):
        for line in script.splitlines():
            for match in re.finditer(r"(?:^|[|;&{]\s*|\bthen\s+)imagebuild ([^;>|]*?)"
                                     r"(?:\s*(?:2>&1|>|;).*)?$", line):
                argv = match.group(1)
                for shell, value in EXPANSIONS.items():
                    argv = argv.replace(shell, value)
                commands.append(shlex.split(argv))
    return commands


@pytest.fixture(scope="module")
def all_commands(tmp_path_factory: pytest.TempPathFactory) -> list[list[str]]:
    import shutil

    from tests.support.linters import REPO_ROOT

    commands: list[list[str]] = []
    for name, text in CONFIGS.items():
        project = tmp_path_factory.mktemp(name)
        shutil.copytree(REPO_ROOT / "recipes", project / "recipes")
        if text:
            write_config(project, text)
        for item in generated_files(project):
            if item.path.suffix == ".yml":
                commands += command_lines(item.text)
    return commands


def test_commands_are_found(all_commands: list[list[str]]) -> None:
    found = {argv[0] for argv in all_commands}
    assert found == set(SUBCOMMANDS)
    assert ["build", "rocm-7.0.2", "--backend", "podman", "--site-ca", "/etc/ssl/ca.pem",
            "--cache-from", "registry.example.org/hpc/x/imagebuild-cache",
            "--cache-to", "registry.example.org/hpc/x/imagebuild-cache",
            "--push", "registry.example.org/hpc/x", "--json"] in all_commands
    assert ["promote", "stable", EXPANSIONS['"$canonical"'], "2025.06"] in all_commands


@pytest.mark.parametrize("subcommand", SUBCOMMANDS)
def test_generated_commands_parse(subcommand: str, all_commands: list[list[str]],
                                  capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    registered = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    if subcommand not in registered:
        pytest.skip(f"`imagebuild {subcommand}` is not in this checkout yet")
    for argv in (a for a in all_commands if a[0] == subcommand):
        try:
            args = parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"imagebuild {shlex.join(argv)}: {capsys.readouterr().err.strip()}")
        assert callable(args.func)
