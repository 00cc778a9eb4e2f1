"""CI configuration: packaged defaults, the project's ci/config.yaml override, and one clear
line per problem (file:line: key: expected)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.ci.config import PROJECT_CONFIG, load_ci_config
from imagebuild.errors import CIConfigError


def write_config(project: Path, text: str) -> Path:
    path = project / PROJECT_CONFIG
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def problems(project: Path) -> list[str]:
    with pytest.raises(CIConfigError) as info:
        load_ci_config(project)
    return [str(p) for p in info.value.problems]


def test_defaults_without_project_config(tmp_path: Path) -> None:
    config = load_ci_config(tmp_path)
    assert config.source is None
    assert config.site.backend == "docker"
    assert config.validate_gpu is True
    assert config.github.gpu_runner == ("self-hosted", "linux", "x64", "gpu")
    assert config.registry is None
    assert config.site.profile is None


def test_override_merges_mappings_and_replaces_lists(tmp_path: Path) -> None:
    write_config(tmp_path, """\
version: 1
registry: registry.example.org:5000/hpc/rocm-pytorch
site:
  profile: cscs-beverin
  backend: podman
validate:
  gpu: false
github:
  runners:
    gpu: [self-hosted, mi300a]
""")
    config = load_ci_config(tmp_path)
    assert config.source == "ci/config.yaml"
    assert config.site.profile == "cscs-beverin" and config.site.backend == "podman"
    assert config.site.squash == ("sqsh",)  # kept from the defaults
    assert config.github.gpu_runner == ("self-hosted", "mi300a")
    assert config.github.plan_runner == ("ubuntu-latest",)
    assert config.validate_gpu is False


def test_every_problem_reported_at_once_with_its_line(tmp_path: Path) -> None:
    path = write_config(tmp_path, """\
version: 1
regsitry: example.org/x
site:
  backend: singularity
  ca_certificate: relative/ca.pem
github:
  runners:
    gpu: ["gpu; rm -rf /"]
  max_parallel: -1
timeout_hours: 0
""")
    assert problems(tmp_path) == [
        f"{path}:2: regsitry: unknown key; did you mean 'registry'?",
        f"{path}:4: site.backend: expected docker or podman, got 'singularity'",
        (f"{path}:5: site.ca_certificate: expected an absolute path on the runner, or null, "
        "got 'relative/ca.pem'"),
        (f"{path}:8: github.runners.gpu[0]: expected a runner label like self-hosted or gpu, "
        "got 'gpu; rm -rf /'"),
        f"{path}:9: github.max_parallel: must be at least 0, got -1",
        f"{path}:10: timeout_hours: must be at least 1, got 0",
    ]


def test_project_config_needs_a_version(tmp_path: Path) -> None:
    path = write_config(tmp_path, "registry: null\n")
    assert problems(tmp_path) == [
        f"{path}:1: version: missing; the file starts with 'version: 1'"]


@pytest.mark.parametrize("text, expected", [
    ("- a list\n", "the CI configuration must be a YAML mapping"),
    ("version: 1\nsite: [\n", "invalid YAML"),
    ("version: 1\ninstall: 'imagebuild @@ nope'\n",
     "install: 'imagebuild @@ nope' is neither a pip requirement"),
    ("version: 1\nregistry: 'Registry.example.org/UPPER'\n", "registry: expected a registry"),
])
def test_malformed_configs(tmp_path: Path, text: str, expected: str) -> None:
    write_config(tmp_path, text)
    assert any(expected in line for line in problems(tmp_path))


@pytest.mark.parametrize("install", [".", "./tool", "imagebuild==0.1.0",
                                     "imagebuild @ git+https://example.org/imagebuild@v0.1.0"])
def test_install_accepts_requirements_and_directories(tmp_path: Path, install: str) -> None:
    write_config(tmp_path, f"version: 1\ninstall: '{install}'\n")
    assert load_ci_config(tmp_path).install == install


def test_site_profile_must_exist(tmp_path: Path) -> None:
    path = write_config(tmp_path, "version: 1\nsite:\n  profile: cscs-bevrin\n")
    assert problems(tmp_path) == [
        f"{path}:3: site.profile: no site profile 'cscs-bevrin'; did you mean 'cscs-beverin'?"]


def test_project_site_profile_is_found(tmp_path: Path) -> None:
    """A project may add its own site profile in sites/NAME.yaml."""
    (tmp_path / "sites").mkdir()
    (tmp_path / "sites" / "my-cluster.yaml").write_text("name: my-cluster\n")
    write_config(tmp_path, "version: 1\nsite:\n  profile: my-cluster\n")
    assert load_ci_config(tmp_path).site.profile == "my-cluster"
