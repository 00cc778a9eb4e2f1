"""The end-to-end image's squashfs files opened by the runtime they are made for: a real
enroot (the runtime under CSCS's Container Engine), built from source, as root and as an
unprivileged user, for the image built by docker and the one built by podman.

Checked: plain ``python3`` is the venv's and imports torch; the environment is what
``docker run`` / ``podman run`` show, apart from the variables a runtime sets itself
(``RUNTIME_OWNED``, listed in docs/runtimes.md too); ``imagebuild validate --allow-cpu`` passes on
enroot's read-only root and keeps its report; the image's default command runs; the build
host's /etc files are empty; and the EDF written beside the .sqsh, applied the way the
Container Engine applies it (env, mounts, writable), gives that environment and those mounts.

Runs after test_end_to_end.py (same session fixtures, same project): the docker image and
its artifacts are reused there (the build is a no-op); the podman image is built here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.convert.tarfilter import HOST_FILES
from imagebuild.engine.podman import inherited_ulimits
from imagebuild.images import latest_tag
from testbed.cpu_recipe import TORCH_VERSION
from tests.support.edf_enroot import enroot_start, read_edf
from tests.support.engine_env import (
    imagebuild_env,
    podman_engine,  # noqa: F401  (pytest fixture)
)
from tests.support.enroot import (
    TEST_USER,
    Container,
    Enroot,
    EnrootUnavailable,
    User,
    build_enroot,
    environment,
    shared_directory,
)
from tests.support.squashfs import cat

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

RECIPE = "cpu-e2e"
SITE = "cscs-beverin"
REPO = Path(__file__).resolve().parents[2]

#: Variables a runtime sets itself: `env` under enroot and under the engine may differ in
#: these, in nothing else. docs/runtimes.md ("Which runtimes are proven, and how") lists them too.
RUNTIME_OWNED = {
    "HOSTNAME": "docker and podman set it to the container's host name; enroot shares the "
                "host's UTS namespace and sets no variable",
    "HOME": "enroot's login shell sets it from the passwd entry of the user who starts the "
            "container; the engines from the image's USER (root)",
    "USER": "set by enroot's login shell (the user who starts the container)",
    "LOGNAME": "set by enroot's login shell",
    "SHELL": "set by enroot's login shell (that user's shell)",
    "PWD": "set by the shell that runs enroot's /etc/rc",
    "SHLVL": "set by the shell that runs enroot's /etc/rc",
    "TERM": "enroot passes the host's TERM (environ.d/10-terminal.env), empty when unset; "
            "podman sets xterm",
    "container": "podman marks its containers with container=podman",
}


def undocumented_differences(seen: dict[str, str], expected: dict[str, str]) -> list[str]:
    """Names whose values differ, or that only one side has, outside RUNTIME_OWNED."""
    names = (set(seen) | set(expected)) - set(RUNTIME_OWNED)
    return [f"{name}: enroot {seen.get(name)!r} != engine {expected.get(name)!r}"
            for name in sorted(names) if seen.get(name) != expected.get(name)]


def timed(label: str, started: float) -> None:
    print(f"\n[enroot] {label}: {time.monotonic() - started:.1f} s")


# --- the images, as test_end_to_end.py builds them -----------------------------------------

@dataclass(frozen=True)
class Built:
    backend: str
    image: str
    sqsh: Path
    edf: Path
    #: ``docker run`` / ``podman run`` up to the image reference.
    run: tuple[str, ...]

    def run_in_engine(self, *command: str, stdin: str | None = None) -> str:
        argv = [*self.run, *(("-i",) if stdin is not None else ()), self.image, *command]
        return subprocess.run(argv, input=stdin, check=True, capture_output=True, text=True,
                              timeout=300).stdout


@pytest.fixture(scope="module")
def project_env(project: Path, wheel_index, tmp_path_factory: pytest.TempPathFactory,
                docker_engine) -> Iterator[Path]:  # type: ignore[no-untyped-def]
    """The end-to-end project, locked (test_end_to_end.py's first phase, when it has not
    run in this session)."""
    with imagebuild_env(project, tmp_path_factory.mktemp("enroot-cache")):
        if not (project / "recipes" / f"pylock.{RECIPE}.toml").is_file():
            assert main(["lock", RECIPE, "--index-url", wheel_index.url_for("cpu/")]) == 0
        yield project


@pytest.fixture(scope="module", params=["docker", "podman"])
def built(request: pytest.FixtureRequest, project_env: Path) -> Built:
    started = time.monotonic()
    if request.param == "docker":
        # test_end_to_end.py's build: with its options a no-op when it ran before.
        out = project_env / "artifacts"
        argv = ["build", RECIPE, "--squash", "sqsh,sif", "--site", SITE]
        run: tuple[str, ...] = ("/usr/bin/docker", "run", "--rm", "--network", "host")
    else:
        engine = request.getfixturevalue("podman_engine")
        out = project_env / "artifacts-podman"
        argv = ["build", RECIPE, "--backend", "podman", "--squash", "sqsh", "--site", SITE,
                "--output-dir", str(out)]
        run = (engine.binary, "run", "--rm", "--network", "host", *inherited_ulimits())
    assert main(argv) == 0, f"imagebuild {' '.join(argv)} failed"
    timed(f"{request.param} image and squashfs (imagebuild build)", started)
    return Built(request.param, latest_tag(RECIPE), out / f"{RECIPE}.sqsh",
                 out / f"{RECIPE}.toml", run)


@pytest.fixture(scope="module")
def engine_environment(built: Built) -> dict[str, str]:
    return environment(built.run_in_engine("env"))


# --- enroot and its containers -------------------------------------------------------------

@pytest.fixture(scope="module")
def world() -> Iterator[Path]:
    """A directory the unprivileged user may enter: enroot, the images, its state."""
    directory = shared_directory("imagebuild-enroot-")
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def enroot(world: Path) -> Enroot:
    try:
        built = build_enroot(world / "enroot")
    except EnrootUnavailable as exc:
        pytest.skip(str(exc))
    print(f"\n[enroot] built enroot {built.version} from source: {built.build_seconds:.1f} s")
    return built


@pytest.fixture(scope="module", params=["root", "unprivileged"])
def user(request: pytest.FixtureRequest) -> User:
    if os.geteuid() != 0:
        pytest.skip("enroot as root, and switching to the unprivileged test user, need root "
                    "(CI runs as root)")
    if request.param == "root":
        return User.named("root")
    try:
        return User.named(TEST_USER)
    except KeyError:
        pytest.skip(f"no user {TEST_USER!r}: .ci/setup-system.sh creates it")


def shared_image(world: Path, built: Built, name: str) -> Path:
    """The artifact where every user can read it (a hard link: same bytes, no copy)."""
    target = world / name
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        try:
            os.link(built.sqsh, target)
        except OSError:
            shutil.copyfile(built.sqsh, target)
    target.chmod(0o644)
    return target


@pytest.fixture(scope="module")
def container(enroot: Enroot, world: Path, built: Built, user: User) -> Iterator[Container]:
    image = shared_image(world, built, f"{built.backend}.sqsh")
    box = Container(enroot, user, world / f"state-{built.backend}-{user.name}", built.backend)
    seconds = box.create(image)
    print(f"\n[enroot] enroot create ({built.backend} image, as {user.name}): {seconds:.1f} s")
    yield box
    box.remove()


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, (f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}"
                                  f"\n--- stderr\n{proc.stderr[-3000:]}")
    return proc


# --- the checks ------------------------------------------------------------------------------

def test_plain_python3_is_the_venv_with_torch(container: Container) -> None:
    """A login shell resets PATH (/etc/profile); the image's profile.d file restores it."""
    proc = ok(container.start("python3", "-c",
                              "import sys, torch; print(sys.executable); print(torch.__version__)"))
    assert proc.stdout.splitlines()[-2] == "/opt/venv/bin/python3"
    assert proc.stdout.splitlines()[-1].startswith(TORCH_VERSION)


def test_environment_is_what_the_engine_shows(container: Container,
                                              engine_environment: dict[str, str]) -> None:
    seen = environment(ok(container.start("env")).stdout)
    assert not undocumented_differences(seen, engine_environment)
    assert seen["PATH"].startswith("/opt/venv/bin:")
    assert seen["IMAGEBUILD_E2E"] == "yes $HOME stays literal"
    assert seen["HOME"] == container.user.home


def test_validate_passes_on_the_read_only_root(container: Container) -> None:
    probe = container.start("touch", "/probe")
    assert probe.returncode != 0 and "Read-only file system" in probe.stderr, probe
    started = time.monotonic()
    proc = ok(container.start("sh", "-c", "imagebuild validate --allow-cpu && echo @@report "
                              "&& cat /tmp/reports/validate-*.json"))
    timed(f"imagebuild validate --allow-cpu under enroot as {container.user.name}", started)
    table, report = proc.stdout.split("@@report\n")
    assert "validation passed" in table
    assert table.splitlines()[-1].startswith("report: /tmp/reports/validate-")
    assert "cannot write reports/ here (Read-only file system)" in proc.stderr
    data = json.loads(report)
    assert data["complete"] and data["summary"]["exit_code"] == 0
    assert data["manifest_found"] and data["recipe"] == RECIPE


def test_default_command_runs(container: Container, built: Built) -> None:
    """No command: enroot's /etc/rc runs the image's CMD (bash, reading stdin)."""
    script = 'echo "$0 in $PWD"; python3 -c "import torch; print(torch.__version__)"\n'
    proc = ok(container.start(stdin=script))
    assert proc.stdout == built.run_in_engine(stdin=script)
    assert proc.stdout.startswith("bash in /\n")


def test_build_host_files_are_empty(built: Built) -> None:
    """Whatever the engine left there (a podman build keeps the build host's)."""
    for name in HOST_FILES:
        assert cat(built.sqsh, name) == b"", name


def site_file_systems(edf: dict, host: dict[str, str], request: pytest.FixtureRequest) -> None:
    """The site's file systems the EDF mounts by absolute path (Beverin: /capstor, /iopsstor),
    made here as the empty directories a node would have; removed afterwards."""
    for spec in edf.get("mounts", []):
        source = spec.split(":", 1)[0]
        if "$" in source or Path(source).exists():
            continue
        Path(source).mkdir(parents=True)
        request.addfinalizer(lambda path=source: os.rmdir(path))


def test_edf_applies_like_the_container_engine(enroot: Enroot, world: Path, built: Built,
                                               engine_environment: dict[str, str],
                                               request: pytest.FixtureRequest) -> None:
    """The EDF beside the .sqsh, as the Container Engine applies it: the image from
    ${SCRATCH}, the site's [env] over the image's, ${SCRATCH} mounted read-write and a
    writable root; run by the unprivileged user, as jobs on a cluster are."""
    if os.geteuid() != 0:
        pytest.skip("switching to the unprivileged test user needs root (CI runs as root)")
    try:
        user = User.named(TEST_USER)
    except KeyError:
        pytest.skip(f"no user {TEST_USER!r}: .ci/setup-system.sh creates it")
    scratch = world / f"scratch-{built.backend}"
    shared_image(world, built, f"scratch-{built.backend}/imagebuild/{RECIPE}.sqsh")
    submitted_from = scratch / "run"  # the job's submit directory: ${PWD}, the workdir
    submitted_from.mkdir(exist_ok=True)
    for path in (scratch, scratch / "imagebuild", submitted_from):
        os.chown(path, user.uid, user.gid)
    edf = read_edf(built.edf)
    host = {"SCRATCH": str(scratch), "HOME": user.home, "PWD": str(submitted_from),
            "USER": TEST_USER}
    site_file_systems(edf, host, request)
    start = enroot_start(edf, host, engine_environment, source=built.edf.name)
    assert Path(start.image) == scratch / "imagebuild" / f"{RECIPE}.sqsh"
    # The Container Engine applies annotations (hooks) and workdir itself; enroot has no
    # option for either.
    assert start.writable and start.env and start.not_applied == ("annotations", "workdir")
    box = Container(enroot, user, world / f"state-edf-{built.backend}", "edf")
    box.create(Path(start.image))
    request.addfinalizer(box.remove)

    seen = environment(ok(box.start("env", options=start.options())).stdout)
    assert not undocumented_differences(seen, {**engine_environment, **start.env})
    assert {key: seen.get(key) for key in start.env} == start.env

    (scratch / "from-host").write_text("host\n")
    script = 'cat "$1/from-host" && echo container > "$1/from-container" && touch /probe'
    proc = ok(box.start("sh", "-c", script, "sh", str(scratch), options=start.options()))
    assert proc.stdout == "host\n"
    assert (scratch / "from-container").read_text() == "container\n"

    read_only = enroot_start({**edf, "writable": False}, host, engine_environment)
    probe = box.start("touch", "/probe", options=read_only.options())
    assert probe.returncode != 0 and "Read-only file system" in probe.stderr


def test_runtime_owned_variables_are_documented() -> None:
    doc = (REPO / "docs" / "runtimes.md").read_text()
    missing = [name for name in RUNTIME_OWNED if f"`{name}`" not in doc]
    assert not missing, f"docs/runtimes.md does not document: {', '.join(missing)}"
