"""Engine detection by capability, and command lines."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from imagebuild.engine.base import BuildRequest, ContainerSpec, Mount
from imagebuild.engine.docker import DockerEngine, find_docker_client
from imagebuild.engine.podman import PodmanEngine, container_argv
from imagebuild.engine.select import open_engine, unreachable_reason
from imagebuild.errors import EngineError
from imagebuild.process import CommandResult, CommandRunner


class ScriptedRunner(CommandRunner):
    """Answers commands from a table keyed by argv[0] basename + args; records calls."""

    def __init__(self, answers: dict[tuple[str, ...], tuple[int, str]]):
        super().__init__()
        self.answers = answers
        self.calls: list[tuple[str, ...]] = []

    def run(self, argv, *, env=None, cwd=None, on_line=None, keep_lines=None):
        argv = tuple(str(a) for a in argv)
        self.calls.append(argv)
        code, out = self.answers.get(argv, (127, f"{argv[0]}: not scripted"))
        return CommandResult(argv, code, out)


def make_docker(directory: Path, name: str = "docker") -> str:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return str(path)


def docker_answers(path: str, version: str, buildx: bool, builtin: bool):
    return {
        (path, "version", "--format", "{{.Client.Version}}"): (0, version + "\n"),
        (path, "buildx", "version"): (0, "github.com/docker/buildx v0.17.1") if buildx
        else (1, "docker: 'buildx' is not a docker command."),
        (path, "build", "--help"): (0, "Usage: docker build\n      --secret stringArray")
        if builtin else (1, "ERROR: BuildKit is enabled but the buildx component is missing"),
    }


class FakeSdk:
    def __init__(self, reachable: bool = True):
        self.reachable = reachable

    def ping(self):
        if not self.reachable:
            raise ConnectionError("Cannot connect to the Docker daemon")
        return True


def test_prefers_a_buildkit_capable_client_over_the_first_on_path(tmp_path):
    newer = make_docker(tmp_path / "local")   # 28.x without buildx: cannot build
    debian = make_docker(tmp_path / "usr")    # 20.10 with built-in BuildKit
    runner = ScriptedRunner({**docker_answers(newer, "28.2.2", False, False),
                             **docker_answers(debian, "20.10.24", False, True)})
    environ = {"PATH": f"{tmp_path / 'local'}:{tmp_path / 'usr'}"}
    engine = open_engine("auto", runner=runner, environ=environ, docker_client=FakeSdk())
    assert isinstance(engine, DockerEngine)
    assert engine.binary == debian and not engine.buildx
    assert engine.describe() == f"docker 20.10.24 ({debian}, built-in BuildKit)"


def test_buildx_wins_and_a_builder_can_be_chosen(tmp_path):
    plain = make_docker(tmp_path / "a")
    buildx = make_docker(tmp_path / "b")
    runner = ScriptedRunner({**docker_answers(plain, "20.10.24", False, True),
                             **docker_answers(buildx, "27.3.1", True, False),
                             (buildx, "buildx", "inspect", "farm"): (0, "Name: farm")})
    environ = {"PATH": f"{tmp_path / 'a'}:{tmp_path / 'b'}"}
    engine = open_engine(None, builder="farm", runner=runner, environ=environ,
                         docker_client=FakeSdk())
    assert engine.binary == buildx and engine.builder == "farm"
    argv, _env = engine.build_command(BuildRequest(Path("/ctx/Dockerfile"), Path("/ctx")))
    assert argv[:7] == [buildx, "buildx", "build", "--progress=plain", "--load",
                        "--builder", "farm"]
    assert ["--allow", "network.host"] == argv[7:9]


def test_builder_without_buildx_is_a_clear_error(tmp_path):
    debian = make_docker(tmp_path / "usr")
    runner = ScriptedRunner(docker_answers(debian, "20.10.24", False, True))
    with pytest.raises(EngineError, match=r"no usable docker backend: .*no buildx plugin"):
        open_engine("auto", builder="farm", runner=runner,
                    environ={"PATH": str(tmp_path / "usr")}, docker_client=FakeSdk())
    with pytest.raises(EngineError, match="only valid with the docker backend"):
        open_engine("podman", builder="farm", runner=runner, environ={"PATH": ""})


def test_forced_binary_and_unknown_backend(tmp_path):
    debian = make_docker(tmp_path / "usr")
    make_docker(tmp_path / "local")
    runner = ScriptedRunner(docker_answers(debian, "20.10.24", False, True))
    environ = {"PATH": str(tmp_path / "local"), "IMAGEBUILD_DOCKER": debian}
    probe, _ = find_docker_client(runner, environ)
    assert probe.path == debian
    with pytest.raises(EngineError, match="IMAGEBUILD_DOCKER=/nope: no such executable"):
        find_docker_client(runner, {"PATH": "", "IMAGEBUILD_DOCKER": "/nope"})
    with pytest.raises(EngineError, match="--backend kaniko: expected one of auto, docker"):
        open_engine("kaniko", runner=runner, environ=environ)


def test_auto_falls_back_to_podman_when_the_daemon_is_down(tmp_path):
    debian = make_docker(tmp_path / "bin")
    podman = make_docker(tmp_path / "bin", "podman")
    runner = ScriptedRunner({**docker_answers(debian, "20.10.24", False, True),
                             (podman, "version", "--format", "{{.Client.Version}}"): (0, "4.3.1")})
    environ = {"PATH": str(tmp_path / "bin")}
    engine = open_engine("auto", runner=runner, environ=environ,
                         docker_client=FakeSdk(reachable=False))
    assert isinstance(engine, PodmanEngine) and engine.describe() == f"podman 4.3.1 ({podman})"
    assert engine.selection_note.startswith("docker not used: docker daemon not reachable at "
                                            "unix:///var/run/docker.sock, the default")
    with pytest.raises(EngineError) as info:
        open_engine("docker", runner=runner,
                    environ={**environ, "DOCKER_HOST": "unix:///nonexistent.sock"},
                    docker_client=FakeSdk(reachable=False))
    assert info.value.text() == ("no usable docker backend: docker daemon not reachable at "
                                 "DOCKER_HOST=unix:///nonexistent.sock: Cannot connect to the "
                                 "Docker daemon")
    assert info.value.hint == ("start the daemon, point DOCKER_HOST at it, or pass "
                               "--backend podman")


def test_the_unreachable_reason_is_the_systems_not_the_sdks_wrapping() -> None:
    """requests and urllib3 wrap the socket's error as a cause or an argument; the reason is
    the address and the system's words."""
    environ = {"DOCKER_HOST": "unix:///nonexistent.sock"}
    try:
        try:
            raise FileNotFoundError(2, "No such file or directory")
        except OSError as exc:
            wrapped = ConnectionError("Connection aborted.", exc)
            raise RuntimeError(f"Error while fetching server API version: {wrapped.args}") \
                from wrapped
    except RuntimeError as exc:
        assert unreachable_reason(exc, environ) == (
            "docker daemon not reachable at DOCKER_HOST=unix:///nonexistent.sock: "
            "no such file or directory")
    refused = ConnectionRefusedError(111, "Connection refused")
    # no system error under it: the exception's own last line
    assert unreachable_reason(RuntimeError("proxy said:\nTLS handshake failed"), {}) == (
        "docker daemon not reachable at unix:///var/run/docker.sock, the default (no "
        "DOCKER_HOST): TLS handshake failed")
    assert unreachable_reason(RuntimeError("pool", refused), {}).endswith(
        ": connection refused")


def test_an_engine_opened_to_read_needs_no_docker_client(tmp_path):
    """squash and validate open the daemon through the SDK: no BuildKit client is probed."""
    runner = ScriptedRunner({})
    engine = open_engine("auto", for_build=False, runner=runner, environ={"PATH": ""},
                         docker_client=FakeSdk())
    assert isinstance(engine, DockerEngine) and engine.binary is None and runner.calls == []
    with pytest.raises(EngineError, match="cannot build"):
        engine.build_command(BuildRequest(Path("/p/Dockerfile"), Path("/p")))
    podman = make_docker(tmp_path / "bin", "podman")
    runner = ScriptedRunner({(podman, "version", "--format", "{{.Client.Version}}"):
                             (0, "4.3.1")})
    engine = open_engine("auto", for_build=False, runner=runner,
                         environ={"PATH": str(tmp_path / "bin")},
                         docker_client=FakeSdk(reachable=False))
    assert isinstance(engine, PodmanEngine) and engine.binary == podman


def test_nothing_usable_names_every_reason(tmp_path):
    with pytest.raises(EngineError) as caught:
        open_engine("auto", runner=ScriptedRunner({}), environ={"PATH": str(tmp_path)})
    assert str(caught.value) == ("no container engine available (docker: no docker client on "
                                 "PATH; podman: podman not installed)")


def test_build_command_lines(tmp_path):
    request = BuildRequest(
        Path("/p/Dockerfile"), Path("/p"), tags=("a/b:1",), target="final",
        build_args={"B": "2", "A": "1"}, secrets={"site-ca": Path("/etc/ca.pem")},
        labels={"imagebuild.hash": "h"}, network="host", no_cache=True,
        iidfile=Path("/t/iid"))
    docker = DockerEngine("/usr/bin/docker", buildx=False, runner=ScriptedRunner({}))
    argv, env = docker.build_command(request)
    assert env["DOCKER_BUILDKIT"] == "1"
    assert argv == ["/usr/bin/docker", "build", "--progress=plain", "-f", "/p/Dockerfile",
                    "-t", "a/b:1", "--target", "final", "--build-arg", "A=1",
                    "--build-arg", "B=2", "--label", "imagebuild.hash=h",
                    "--secret", "id=site-ca,src=/etc/ca.pem", "--network", "host",
                    "--no-cache", "--iidfile", "/t/iid", "/p"]
    podman = PodmanEngine("/usr/bin/podman", runner=ScriptedRunner({}))
    argv, _ = podman.build_command(request)
    assert argv[:5] == ["/usr/bin/podman", "build", "--layers", "--format", "docker"]
    assert argv[5:] == ["-f", "/p/Dockerfile"] + [a for a in docker.build_command(request)[0]
                                                  if a not in ("/usr/bin/docker", "build",
                                                               "--progress=plain", "-f",
                                                               "/p/Dockerfile")]


def test_a_builder_needs_buildx_on_the_engine_too():
    engine = DockerEngine("/usr/bin/docker", buildx=False, runner=ScriptedRunner({}))
    with pytest.raises(EngineError, match="--builder farm: selecting a builder needs docker "
                                          "buildx, and /usr/bin/docker has no buildx plugin"):
        engine.using_builder("farm")
    farm = DockerEngine("/opt/docker", buildx=True, runner=ScriptedRunner({})).using_builder("farm")
    assert farm.describe() == "docker (/opt/docker, buildx builder farm)"


def test_podman_reads_an_image_configuration_from_its_inspect():
    inspect = ('[{"Id": "abc", "Created": "2025-01-02T03:04:05.123456789Z", '
               '"Architecture": "amd64", "Config": {"Env": ["A=1"], "WorkingDir": "/w", '
               '"Labels": {"rocm": "7.0.2"}}}]')
    runner = ScriptedRunner({("/usr/bin/podman", "image", "inspect", "img:1"): (0, inspect)})
    engine = PodmanEngine("/usr/bin/podman", runner=runner)
    config = engine.image_config("img:1")
    assert (config.env, config.workdir, config.labels) == (("A=1",), "/w", (("rocm", "7.0.2"),))
    assert config.created == 1735787045
    assert engine.image_id("img:1") == "sha256:abc"
    assert engine.daemon_ref("img:1") is None
    assert DockerEngine(None, buildx=False).daemon_ref("img:1") == "img:1"


def test_podman_runs_a_container_and_streams_its_output(tmp_path):
    """The podman client's lines come back as output; its exit code is the result."""
    podman = tmp_path / "podman"
    podman.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\nexit 3\n')
    podman.chmod(0o755)
    spec = ContainerSpec(image="img:1", entrypoint=("python3", "-m", "checks"),
                         command=("--events",), env={"A": "1"},
                         mounts=(Mount("/host", "/in", read_only=True),), gpus="rocm")
    chunks: list[bytes] = []
    code = PodmanEngine(str(podman)).run_container(spec, chunks.append)
    assert code == 3
    said = b"".join(chunks).decode().splitlines()
    assert said == container_argv(spec, str(podman))[1:]
    assert said[said.index("--entrypoint") + 1] == "python3"
    assert said[-4:] == ["img:1", "-m", "checks", "--events"]
    assert "/host:/in:ro" in said and "A=1" in said and "/dev/kfd" in said


# the SDK's failed connection attempt leaves its socket to the garbage collector
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_unreachable_daemon_is_named_by_the_real_sdk(monkeypatch, tmp_path):
    """The docker SDK itself against a socket that does not exist: the error names where
    it looked and what to do, not only the transport's exception."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nonexistent.sock")
    with pytest.raises(EngineError) as caught:
        open_engine("docker", for_build=False)
    message = str(caught.value)
    assert f"DOCKER_HOST=unix://{tmp_path}/nonexistent.sock" in message
    assert "hint: start the daemon, point DOCKER_HOST at it, or pass --backend podman" in message
    gc.collect()  # the warning about that socket is raised here, under this test's filter
