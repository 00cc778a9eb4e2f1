"""The registry cache at the engine seam: which command lines each engine gets, which engines
are refused and why, and the stage table read from real build output.

The two logs in data/ are real: the same 4-stage Dockerfile (data/registry-cache.Dockerfile)
built once with --cache-to, then on an engine with empty storage with --cache-from and
PIN_B changed. BuildKit: docker buildx 0.13.1 on Docker 26.1.5 with the containerd image
store (Debian trixie's packages); podman 4.3.1 (Debian 12), whose buildah 1.28 uses no
registry cache after an ARG instruction: stage a, unchanged, is built again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.engine.base import BuildRequest
from imagebuild.engine.build import build_image
from imagebuild.engine.cache import RegistryCache, checked_repository
from imagebuild.engine.docker import DockerEngine
from imagebuild.engine.podman import PodmanEngine
from imagebuild.engine.progress import BuildLogParser
from imagebuild.engine.stage_table import StageTable
from imagebuild.errors import EngineError
from tests.engine.fakes import ReplayEngine
from tests.engine.test_engine_unit import ScriptedRunner

DATA = Path(__file__).parent / "data"
CACHE = RegistryCache("reg.example.org/hpc/cache", "reg.example.org/hpc/cache",
                      {"base": "aaaaaaaaaaaa", "hipblaslt": "bbbbbbbbbbbb"})


def request(tmp_path: Path, cache: RegistryCache | None = CACHE, **kwargs) -> BuildRequest:
    return BuildRequest(dockerfile=tmp_path / "Dockerfile", context=tmp_path, tags=("x:1",),
                        cache=cache, **kwargs)


def table_of(log: str, fmt: str) -> StageTable:
    table, parser = StageTable(), BuildLogParser(fmt)  # type: ignore[arg-type]
    for line in (DATA / log).read_text().splitlines():
        for event in parser.feed(line):
            table(event)
    return table


def test_buildkit_imports_every_stage_entry_and_exports_each_stage_after_the_build(tmp_path):
    engine = DockerEngine("/usr/bin/docker", buildx=True, version="28.2.2",
                          runner=ScriptedRunner({}))
    argv, _ = engine.build_command(request(tmp_path, provenance=True))
    assert argv[argv.index("--cache-from") + 1] == \
        "type=registry,ref=reg.example.org/hpc/cache:base-aaaaaaaaaaaa"
    assert "type=registry,ref=reg.example.org/hpc/cache:hipblaslt-bbbbbbbbbbbb" in argv
    assert "--cache-to" not in argv  # exported stage by stage once the build succeeded
    assert "--provenance=mode=max" in argv
    exports = engine.cache_export_commands(request(tmp_path))
    assert [stage for stage, _, _ in exports] == ["base", "hipblaslt"]
    _, export, _ = exports[1]
    assert export[export.index("--target") + 1] == "hipblaslt"
    assert export[export.index("--cache-to") + 1] == \
        "type=registry,ref=reg.example.org/hpc/cache:hipblaslt-bbbbbbbbbbbb,mode=max"
    assert export[export.index("--output") + 1] == "type=cacheonly"
    assert "--load" not in export and "-t" not in export and "--provenance=mode=max" not in export
    assert export[-1] == str(tmp_path)


def test_import_only_exports_nothing(tmp_path):
    engine = DockerEngine("/usr/bin/docker", buildx=True, runner=ScriptedRunner({}))
    only_import = RegistryCache("reg.example.org/c", None, {"base": "a" * 12})
    assert engine.cache_export_commands(request(tmp_path, only_import)) == []
    argv, _ = engine.build_command(request(tmp_path, only_import))
    assert "type=registry,ref=reg.example.org/c:base-aaaaaaaaaaaa" in argv


def test_podman_passes_the_repository_and_pushes_as_it_builds(tmp_path):
    engine = PodmanEngine("podman", version="5.4.2", runner=ScriptedRunner({}))
    argv, _ = engine.build_command(request(tmp_path))
    assert argv[argv.index("--cache-from") + 1] == "reg.example.org/hpc/cache"
    assert argv[argv.index("--cache-to") + 1] == "reg.example.org/hpc/cache"
    assert engine.cache_export_commands(request(tmp_path)) == []
    assert engine.registry_cache_problem() is None
    assert "no provenance" in (engine.attestation_problem() or "")


def test_podman_before_4_4_is_refused_for_the_arg_bug():
    problem = PodmanEngine("podman", version="4.3.1").registry_cache_problem()
    assert problem is not None and "4.3.1" in problem and "ARG" in problem


def test_docker_20_10_built_in_buildkit_has_no_cache_export():
    engine = DockerEngine("/usr/bin/docker", buildx=False, version="20.10.24+dfsg1")
    problem = engine.registry_cache_problem()
    assert problem is not None and "no --cache-to" in problem
    assert engine.attestation_problem() == problem


class FakeInfo:
    def __init__(self, driver_type: str):
        self.driver_type = driver_type

    def info(self):
        return {"DriverStatus": [["driver-type", self.driver_type]]}


@pytest.mark.parametrize(("driver", "store", "supported"), [
    ("docker", "io.containerd.snapshotter.v1", True),
    ("docker", "", False),
    ("docker-container", "", True),
    ("remote", "", True),
])
def test_buildx_exports_need_a_builder_that_can(driver, store, supported):
    runner = ScriptedRunner({("/usr/bin/docker", "buildx", "inspect"): (
        0, f"Name:          default\nDriver:        {driver}\n")})
    engine = DockerEngine("/usr/bin/docker", buildx=True, runner=runner,
                          client=FakeInfo(store))
    problem = engine.registry_cache_problem()
    assert (problem is None) == supported, problem
    if not supported:
        assert "containerd image store" in problem
    engine.attestation_problem()
    assert runner.calls.count(("/usr/bin/docker", "buildx", "inspect")) == 1  # probed once


def test_an_engine_that_cannot_is_refused_before_the_build(tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    engine = ReplayEngine([])  # its base class keeps no registry cache
    with pytest.raises(EngineError) as caught:
        build_image(engine, tmp_path / "Dockerfile", tmp_path, ["x:1"], cache=CACHE,
                    log_path=tmp_path / "build.log")
    assert caught.value.message.startswith("--cache-to: replay engine keeps no build cache")
    assert "podman 4.4" in (caught.value.hint or "")
    assert engine.requests == []


@pytest.mark.parametrize("value", ["reg.example.org/hpc/cache", "127.0.0.1:5000/c/d",
                                   "localhost/cache"])
def test_cache_repositories(value):
    assert checked_repository(value, "--cache-to") == value


@pytest.mark.parametrize("value", ["cache", "hpc/cache", "reg.example.org/c:tag",
                                   "reg.example.org/c@sha256:" + "0" * 64, "reg.example.org/UP"])
def test_not_cache_repositories(value):
    with pytest.raises(EngineError, match="--cache-from"):
        checked_repository(value, "--cache-from")


def test_buildkit_table_counts_imported_cached_and_built_steps_per_stage():
    table = table_of("buildkit-registry-cache.log", "buildkit")
    rows = {row.stage: row for row in table.rows()}
    # base's RUN came from the registry (its layers downloaded and unpacked), a's without
    # a download (CACHED), b changed (PIN_B) and so did the final steps after COPY --from=b
    assert rows["base"].labels("imported") == ["base 2/2: RUN echo base > /base.txt"]
    assert rows["a"].labels("cached") == ['a 1/1: RUN echo "a 1" > /a.txt && sleep 3']
    assert rows["b"].labels("built") == ['b 1/1: RUN echo "b 2" > /b.txt && sleep 3']
    assert rows["final"].labels("imported") == ["final 1/3: COPY --from=a /a.txt /a.txt"]
    assert rows["final"].count("built") == 2
    assert table.lines()[-1].split() == ["total", "6", "2", "1", "3"]


def test_podman_4_3_table_shows_the_unchanged_stage_built_again():
    rows = {row.stage: row for row in table_of("podman-registry-cache.log", "podman").rows()}
    assert rows["base"].count("imported") == 1
    assert rows["a"].count("built") == 2  # ARG PIN_A and its RUN: buildah#4315
    assert rows["final"].labels("imported") == ["final 2/4: COPY --from=a /a.txt /a.txt"]


def test_buildkit_names_steps_of_stages_with_ten_or_more_steps():
    parser = BuildLogParser("buildkit")
    events = parser.feed("#16 [final  4/10] COPY --from=python /opt/venv /opt/venv")
    assert (events[0].stage, events[0].step) == ("final", "4/10")


def test_a_cache_entry_not_found_is_no_failure_of_the_build():
    """BuildKit reports a --cache-from entry that does not exist yet as an ERROR of its
    import step and builds on (docker buildx 0.13.1, an empty cache repository)."""
    parser = BuildLogParser("buildkit")
    events = parser.feed_all([
        "#4 importing cache manifest from 127.0.0.1:5000/c:toolchain-e40c5563b785",
        ("#4 ERROR: failed to configure registry cache importer: "
        "127.0.0.1:5000/c:toolchain-e40c5563b785: not found"),
        "#9 [toolchain 1/1] RUN make",
        "#9 ERROR: process \"/bin/sh -c make\" did not complete successfully: exit code: 2",
    ])
    assert [e.kind for e in events] == ["step", "output", "step", "error"]
    failure = parser.failure()
    assert failure.step == "toolchain 1/1: RUN make"
