"""RCCL's tuner plugin in the ROCm images: the recipe key, the stage the plan and the
Dockerfile make of it (RCCL's repository at the release's tag, pinned by the lock to a
commit, the example's directory checked out alone), and the stage's sources run for real
here: the example tuner from the source fixture
(../shared/fixtures/sources/rccl-ext-tuner.tar.gz) compiled with gcc, with and
without the project's v4 adapter; the interface check against an ELF library carrying an
RCCL's lookup strings; rccl-tuner-probe dlopening the tuner with a config written by
``imagebuild tune rccl``. tests/components/network_plugin/test_plugin_stage.py builds the stage in an image
against Debian's real RCCL 7.2.4.
"""

from __future__ import annotations

import csv
import json
import socket
import subprocess
import sys
import tarfile
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from imagebuild.components.rccl_tuner import component as rccl_tuner
from imagebuild.components.rccl_tuner.component import RcclTuner
from imagebuild.errors import RecipeError, RenderError
from imagebuild.project import chosen_project
from imagebuild.recipe.load import load_recipe
from imagebuild.recipe.model import GitSource
from imagebuild.render.context import build_context
from imagebuild.render.dockerfile import render_dockerfile
from imagebuild.render.edf import generated_edf
from imagebuild.render.manifest import manifest
from imagebuild.render.plan import plan_for
from imagebuild.render.stages import stage_plan
from imagebuild.tune.rccl import SweepPoint, tuner_config
from testbed.source_mirror import fixtures_dir
from tests.components.conftest import REPO
from tests.support.render import parse_dockerfile, write_lock
from tests.support.scripts import staged

CHECK = staged(rccl_tuner.CHECK, rccl_tuner.FOLDER / "check.py")
ARCHIVE = "rccl-ext-tuner.tar.gz"
RCCL = "https://github.com/ROCm/rccl.git"
TUNER = RcclTuner(enabled=True, source=GitSource(RCCL, "rocm-7.2.4"))


@pytest.fixture
def rocm(tmp_path: Path):
    recipe = load_recipe("rocm-7.2.4", REPO).with_component("rccl_tuner", TUNER)
    lock = write_lock(recipe, tmp_path / "pylock.rocm-7.2.4.toml")
    return recipe, lock


# --- recipe ----------------------------------------------------------------------------------

def _recipe(tmp_path: Path, body: str, rocm: str = "7.2.4") -> Path:
    path = tmp_path / "r.yaml"
    path.write_text(f"version: 1\nrocm: {rocm}\nbase_image: b:1\nwheels:\n"
                    "  index_url: https://example.org/\n  packages:\n    torch: 2.9.1\n" + body)
    return path


SECTION = f"rccl_tuner:\n  enabled: true\n  repository: {RCCL}\n  ref: rocm-7.2.4\n"


def test_the_ref_defaults_to_the_releases_tag(tmp_path: Path) -> None:
    body = f"rccl_tuner:\n  enabled: true\n  repository: {RCCL}\n"
    tuner = rccl_tuner.section(load_recipe(str(_recipe(tmp_path, body, "7.0.2"))))
    assert tuner is not None and tuner.source == GitSource(RCCL, "rocm-7.0.2")


def test_the_section_loads_with_its_defaults(tmp_path: Path) -> None:
    recipe = load_recipe(str(_recipe(tmp_path, SECTION)))
    assert recipe.components["rccl_tuner"] == TUNER
    assert recipe.to_dict()["rccl_tuner"]["source"]["ref"] == "rocm-7.2.4"
    assert TUNER.example_dir == "ext-tuner/example" and TUNER.interface_adapter


@pytest.mark.parametrize("name", ["rocm-7.0.2", "rocm-7.0.2-swiss-ai", "rocm-7.1.1",
                                  "rocm-7.2.4"])
def test_the_packaged_rocm_recipes_build_the_tuner_from_rccl_at_their_release(name) -> None:
    recipe = load_recipe(name, REPO)
    tuner = rccl_tuner.section(recipe)
    assert tuner is not None and tuner.interface_adapter
    assert tuner.source == GitSource(RCCL, f"rocm-{recipe.rocm}")


@pytest.mark.parametrize("name", ["rocm-6.4.4", "rocm-7.14.1", "rocm-10.1.0"])
def test_recipes_whose_rccl_cannot_take_it_have_none(name) -> None:
    # RCCL 2.22 (ROCm 6.4) looks up tuner v3 and v2 only; the TheRock lines have no RCCL in
    # their base.
    assert rccl_tuner.section(load_recipe(name, REPO)) is None


def test_the_lock_pins_rccls_commit_and_a_new_ref_changes_the_recipe() -> None:
    recipe = load_recipe("rocm-7.2.4", REPO)
    pins = rccl_tuner.COMPONENT.pins(TUNER, recipe)
    assert [(p.key, p.source) for p in pins] == [("rccl-tuner", TUNER.source)]  # type: ignore[union-attr]
    moved = recipe.with_component("rccl_tuner", replace(TUNER, source=GitSource(RCCL, "develop")))
    assert moved.lock_input_hash() != recipe.lock_input_hash()


@pytest.mark.parametrize(("body", "rocm", "problem"), [
    ("rccl_tuner:\n  enabled: true\n  ref: rocm-7.2.4\n", "7.2.4",
     "rccl_tuner.repository: missing (required when rccl_tuner.enabled is true)"),
    ("rccl_tuner:\n  enabled: true\n  url: https://example.org/t.tar.gz\n", "7.2.4",
     "rccl_tuner.url"),
    (SECTION.replace(RCCL, "'https://x/r.git; rm -rf /'"), "7.2.4", "rccl_tuner.repository"),
    (SECTION + "  example_dir: ../etc\n", "7.2.4", "rccl_tuner.example_dir"),
    (SECTION, "null", "rccl_tuner.enabled: needs a ROCm release"),
])
def test_bad_sections_are_refused(tmp_path: Path, body: str, rocm: str, problem: str) -> None:
    with pytest.raises(RecipeError) as caught:
        load_recipe(str(_recipe(tmp_path, body, rocm)))
    assert problem in str(caught.value)


def test_the_image_owns_nccl_tuner_plugin(rocm) -> None:
    recipe, lock = rocm
    with pytest.raises(RenderError, match="env.NCCL_TUNER_PLUGIN: set by imagebuild itself"):
        plan_for(replace(recipe, env=(("NCCL_TUNER_PLUGIN", "/x.so"),)), lock)


# --- plan, Dockerfile, context ----------------------------------------------------------------

def test_the_stage_builds_the_locked_commit_and_the_image_names_the_tuner(rocm,
                                                                          tmp_path: Path) -> None:
    recipe, lock = rocm
    locked = lock.git("rccl-tuner")
    assert locked is not None and locked.ref == "rocm-7.2.4"
    plan = plan_for(recipe, lock)
    assert rccl_tuner.planned(plan.parts) is not None
    for package in ("gcc", "git", "binutils", "python3"):
        assert package in plan.build_packages
    stages = parse_dockerfile(render_dockerfile(plan))
    stage = stages["rccl-tuner"]
    assert stage.uses == {"toolchain"} and "rccl-tuner" in stages["final"].uses
    flat = " ".join(stage.text.split())
    assert "curl" not in flat and "sha256sum" not in flat
    assert (f"git -C /usr/src/rccl-tuner remote add origin {RCCL} && git -C /usr/src/rccl-tuner "
            "sparse-checkout set --cone ext-tuner/example && git -C /usr/src/rccl-tuner fetch "
            f"-q --depth 1 --filter=blob:none origin {locked.commit} ") in flat
    assert "repository at the locked commit of rocm-7.2.4" in render_dockerfile(plan)
    assert "WORKDIR /usr/src/rccl-tuner/ext-tuner/example" in stage.text
    assert "/tmp/imagebuild/rccl-tuner-v4.c" in stage.text and " plugin.c" not in stage.text
    assert ("tuner-plugin-check.py stage /opt/rccl-tuner/lib/librccl-tuner.so --rccl /opt/rocm "
            "--probe /opt/rccl-tuner/bin/rccl-tuner-probe") in " ".join(stage.text.split())
    final = stages["final"].text
    assert "NCCL_TUNER_PLUGIN=/opt/rccl-tuner/lib/librccl-tuner.so" in final
    assert "NCCL_TUNER_CONFIG_FILE=" not in final.replace("# ", "")
    assert "tuner-plugin-check.py final /opt/rccl-tuner/lib/librccl-tuner.so" in \
        " ".join(final.split())
    assert ":/opt/rccl-tuner/bin" in final
    assert ("rccl-tuner", "toolchain + RCCL's example tuner plugin and its probe",
            "tuner repository/commit, interface adapter") in stage_plan(plan_for(recipe, None))
    assert "rocm-7.2.4 (UNLOCKED: a moving ref)" in render_dockerfile(plan_for(recipe, None))
    data = manifest(plan)["rccl_tuner"]
    assert data["source"] == {"repository": RCCL, "ref": "rocm-7.2.4", "commit": locked.commit,
                              "subdir": "ext-tuner/example"} and data["interface_adapter"]
    [source] = plan.parts["rccl_tuner"].sources
    assert source.pin == locked and source.subdir == "ext-tuner/example"
    context = build_context(plan, tmp_path / "ctx")
    for name in ("tuner-plugin-check.py/__main__.py", "rccl-tuner-v4.c", "rccl-tuner-probe.c"):
        assert name in context.files


def test_without_the_adapter_the_example_is_built_as_it_is(rocm) -> None:
    recipe, lock = rocm
    recipe = recipe.with_component("rccl_tuner", replace(TUNER, interface_adapter=False))
    stage = parse_dockerfile(render_dockerfile(plan_for(recipe, lock)))["rccl-tuner"].text
    assert "rccl-tuner-v4.c" not in stage and " plugin.c" in stage


def test_images_without_a_tuner_set_nothing(rocm) -> None:
    recipe, lock = rocm
    text = render_dockerfile(plan_for(recipe.with_component("rccl_tuner", None), lock))
    assert "rccl-tuner" not in text and "NCCL_TUNER" not in text


# --- the stage's sources, compiled and run ------------------------------------------------------

def _build_script(example: Path, library: Path) -> Path:
    """Runs the stage's build script on ``example``; returns the file holding what it said."""
    done = subprocess.run(["sh", str(rccl_tuner.FOLDER / "tuner-build.sh"), str(example),
                           str(rccl_tuner.FOLDER / "v4-adapter.c"), str(library),
                           library.name], check=True, capture_output=True, text=True)
    said = library.with_suffix(".log")
    said.write_text(done.stdout)
    return said


def _cc(*args: str | Path) -> None:
    subprocess.run(["gcc", "-O2", *map(str, args)], check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The fixture's tuner as it is and with the adapter, the probe, and an ELF library that
    looks up what RCCL 2.27.7 looks up (v4, v3, v2)."""
    work = tmp_path_factory.mktemp("tuner")
    with tarfile.open(fixtures_dir() / ARCHIVE) as archive:
        archive.extractall(work, filter="data")
    example = work / "rccl-ext-tuner" / "ext-tuner" / "example"
    out = {"plain": work / "plain.so", "adapted": work / "adapted.so",
           "probe": work / "rccl-tuner-probe", "rccl": work / "librccl.so"}
    _cc("-fPIC", "-shared", f"-I{example}", f"-I{example / 'nccl'}", "-o", out["plain"],
        example / "plugin.c")
    # As the stage builds it: its build script sees plugin.c export v5 only, so the adapter.
    out["adapted_log"] = _build_script(example, out["adapted"])
    # An example that exports v4 itself (the CSV example before RCCL's NCCL 2.28 sync, a
    # stand-in here): the script builds it as it is.
    older = work / "v4-example"
    (older / "nccl").mkdir(parents=True)
    (older / "plugin.c").write_text(
        'typedef struct { const char* name; } ncclTuner_v4_t;\n'
        'const ncclTuner_v4_t ncclTunerPlugin_v4 = { "Example" };\n')
    out["v4"] = work / "v4.so"
    out["v4_log"] = _build_script(older, out["v4"])
    _cc("-o", out["probe"], rccl_tuner.FOLDER / "probe.c", "-ldl")
    rccl = work / "rccl.c"
    rccl.write_text('const char* tuners[] = {"ncclTunerPlugin_v4", "ncclTunerPlugin_v3", '
                    '"ncclTunerPlugin_v2", "ncclNetPlugin_v10"};\n')
    _cc("-fPIC", "-shared", "-o", out["rccl"], rccl)
    return out


def _check(library: Path, rccl: Path, record: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK), "stage", str(library), "--rccl",
                           str(rccl), "--record", str(record), *extra],
                          check=False, capture_output=True, text=True)


def test_the_example_as_it_is_fails_the_check(built, tmp_path: Path) -> None:
    result = _check(built["plain"], built["rccl"], tmp_path / "r.json")
    assert result.returncode == 1
    assert ("looks up ncclTunerPlugin_v4..v2; the tuner plain.so exports only v5: RCCL "
            "would not load it") in result.stderr
    assert "interface_adapter" in result.stderr and not (tmp_path / "r.json").exists()


def test_the_build_script_adapts_a_v5_example_only(built, tmp_path: Path) -> None:
    assert "exports ncclTunerPlugin_v5 : built behind the v4 adapter" in \
        built["adapted_log"].read_text()
    said = built["v4_log"].read_text()
    assert "exports ncclTunerPlugin_v4 : built as it is (no adapter" in said
    record = tmp_path / "r.json"
    result = _check(built["v4"], built["rccl"], record)
    assert result.returncode == 0, result.stderr
    assert json.loads(record.read_text())["plugin_exports"] == [4]


def test_the_adapted_example_passes_and_the_probe_calls_it(built, tmp_path: Path) -> None:
    record = tmp_path / "r.json"
    result = _check(built["adapted"], built["rccl"], record, "--probe", str(built["probe"]))
    assert result.returncode == 0, result.stderr
    data = json.loads(record.read_text())
    assert data["rccl_looks_up"] == [4, 3, 2] and data["plugin_exports"] == [5, 4]
    assert data["chosen"] == 4
    assert data["probe"].endswith("model ring/simple -> chosen ring/simple channels default")


def test_an_rccl_without_tuner_lookups_is_refused(built, tmp_path: Path) -> None:
    source = tmp_path / "other.c"
    source.write_text('const char* net[] = {"ncclNetPlugin_v10"};\n')
    _cc("-fPIC", "-shared", "-o", tmp_path / "libother.so", source)
    result = _check(built["adapted"], tmp_path / "libother.so", tmp_path / "r.json")
    assert result.returncode == 1 and "no ncclTunerPlugin_v<N> lookup string" in result.stderr


def _probe(built, config: Path | None, collective: str, size: int) -> str:
    env = {"NCCL_TUNER_CONFIG_FILE": str(config or "/nonexistent")}
    result = subprocess.run([str(built["probe"]), str(built["adapted"]), collective, str(size),
                             "1", "8"], capture_output=True, text=True, env=env, check=True)
    return result.stdout.split("-> chosen ")[1].split()[0]


def test_a_tune_rccl_config_changes_the_choice_for_its_sizes_only(built, tmp_path: Path) -> None:
    config = tmp_path / "nccl_tuner.conf"
    config.write_text(tuner_config([
        SweepPoint("allreduce", 65536, "ring", "ll", 9.5),
        SweepPoint("allreduce", 65536, "tree", "ll128", 7.0),
        SweepPoint("allreduce", 1048576, "tree", "simple", 80.0),
        SweepPoint("allreduce", 1048576, "ring", "simple", 60.0)]))
    sizes = (1000, 65536, 65537, 1048576, 1048577, 67108864)
    before = [_probe(built, None, "allreduce", size) for size in sizes]
    after = [_probe(built, config, "allreduce", size) for size in sizes]
    assert before == ["tree/ll", "tree/ll128", "tree/ll128", "ring/simple", "ring/simple",
                      "ring/simple"]
    assert after == ["ring/ll", "ring/ll", "tree/simple", "tree/simple", "ring/simple",
                     "ring/simple"]
    # another collective is not named by the config
    assert _probe(built, config, "allgather", 1000) == _probe(built, None, "allgather", 1000)


def test_the_probe_refuses_a_tuner_without_v4(built) -> None:
    result = subprocess.run([str(built["probe"]), str(built["plain"]), "allreduce", "8"],
                            check=False, capture_output=True, text=True)
    assert result.returncode == 1 and "exports no ncclTunerPlugin_v4" in result.stderr


# --- the tuner's own record of what RCCL asked -----------------------------------------------

def _asked(built, record: Path | None, collective: str, sizes: str, nodes: int = 1,
           ranks: int = 8, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {"NCCL_TUNER_CONFIG_FILE": "/nonexistent"}
    if record is not None:
        env["IMAGEBUILD_TUNER_RECORD"] = str(record)
    return subprocess.run([str(built["probe"]), str(built["adapted"]), collective, sizes,
                           str(nodes), str(ranks)], capture_output=True, text=True, env=env,
                          check=True, cwd=cwd)


def _record_rows(record: Path) -> list[list[str]]:
    return [path.read_text().splitlines() for path in sorted(record.glob("tuner-*.csv"))]


def test_the_adapter_records_each_distinct_request_once_per_process(built,
                                                                    tmp_path: Path) -> None:
    record = tmp_path / "record"
    record.mkdir()
    first = _asked(built, record, "allreduce", "1048576,4096,1048576,302006272")
    assert len(first.stdout.splitlines()) == 4  # every call answered, recorded or not
    _asked(built, record, "allgather", "2101354496,2101354496", nodes=2, ranks=16)
    header = "collective,bytes,num_pipe_ops,reg_buff,n_ranks,n_nodes"
    assert sorted(_record_rows(record)) == sorted([
        [header, "allreduce,1048576,1,0,8,1", "allreduce,4096,1,0,8,1",
         "allreduce,302006272,1,0,8,1"],
        [header, "allgather,2101354496,1,0,16,2"]])
    # one file per process, named after host and pid
    assert all(path.name.startswith(f"tuner-{socket.gethostname()}-")
               for path in record.glob("*.csv"))


def test_without_the_switch_nothing_is_recorded(built, tmp_path: Path) -> None:
    result = _asked(built, None, "allreduce", "4096", cwd=tmp_path)
    assert list(tmp_path.iterdir()) == [] and result.stderr == ""


def test_an_unwritable_record_directory_never_fails_the_collective(built,
                                                                   tmp_path: Path) -> None:
    result = _asked(built, tmp_path / "missing", "allreduce", "4096")
    assert result.stdout.startswith("allreduce 4096 bytes")
    assert "IMAGEBUILD_TUNER_RECORD: cannot write" in result.stderr
    assert "not recording" in result.stderr


def test_tune_rccl_reads_the_records_into_the_collectives_csv(built, tmp_path: Path,
                                                              capsys) -> None:
    from imagebuild.cli import main

    record = tmp_path / "record"
    record.mkdir()
    _asked(built, record, "allreduce", "4096,302006272")
    _asked(built, record, "allreduce", "302006272")
    _asked(built, record, "reducescatter", "4202708992", ranks=8)
    out = tmp_path / "out"
    assert main(["tune", "rccl", "--records", str(record), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "3 collectives (whole-buffer bytes)" in printed
    with (out / "collectives.csv").open(newline="") as handle:
        rows = [(r["collective"], int(r["bytes"]), int(r["calls"]), r["nranks"], r["hosts"])
                for r in csv.DictReader(handle)]
    assert rows == [("allreduce", 4096, 1, "8", "1"), ("allreduce", 302006272, 2, "8", "1"),
                    ("reducescatter", 4202708992, 1, "8", "1")]


def test_from_the_tuners_record_to_a_config_the_tuner_applies(built, tmp_path: Path,
                                                              capsys) -> None:
    """The loop on CPU: the tuner records what RCCL asks; `tune rccl --records --sweep`
    turns it into collectives.csv, sweep.csv (stand-in benchmarks: the one GPU-only part)
    and nccl_tuner.conf; the real tuner then chooses, for each recorded size, what the sweep
    measured fastest."""
    from imagebuild.cli import main
    from tests.support.rccl_tests_standin import write_standins

    record = tmp_path / "record"
    record.mkdir()
    step = {"allreduce": [4096, 1048576, 302006272], "reducescatter": [65536, 4202708992]}
    for collective, sizes in step.items():
        _asked(built, record, collective, ",".join(map(str, sizes)))
    out = tmp_path / "rccl"
    assert main(["tune", "rccl", "--records", str(record), "--sweep", "--gpus", "8",
                 "--rccl-tests-dir", str(write_standins(tmp_path / "bin")),
                 "--out", str(out)]) == 0
    assert "tuner config -> " in capsys.readouterr().out
    with (out / "sweep.csv").open(newline="") as handle:
        sweep = list(csv.DictReader(handle))
    config = out / "nccl_tuner.conf"
    for collective, sizes in step.items():
        for size in sizes:
            measured = min(int(r["bytes"]) for r in sweep if r["collective"] == collective
                           and int(r["bytes"]) >= size)
            fastest = max((r for r in sweep if r["collective"] == collective
                           and int(r["bytes"]) == measured), key=lambda r: float(r["busbw_gbs"]))
            chosen = _probe(built, config, collective, size)
            assert chosen == f"{fastest['algorithm']}/{fastest['protocol']}", (collective, size)
    # the stand-ins' model makes the choice differ by size, and from the probe's own model
    assert _probe(built, config, "allreduce", 4096) == "tree/ll"
    assert _probe(built, config, "allreduce", 302006272) == "ring/simple"
    assert _probe(built, None, "reducescatter", 65536) != _probe(built, config,
                                                                "reducescatter", 65536)


def test_a_record_that_is_not_one_is_refused_naming_the_line(tmp_path: Path, capsys) -> None:
    from imagebuild.cli import main

    bad = tmp_path / "tuner-n1-7.csv"
    bad.write_text("collective,bytes,num_pipe_ops,reg_buff,n_ranks,n_nodes\n"
                   "allreduce,many,1,0,8,1\n")
    assert main(["tune", "rccl", "--records", str(bad), "--out", str(tmp_path / "o")]) != 0
    err = capsys.readouterr().err
    assert f"{bad}:2: bad record row" in err
    (tmp_path / "empty").mkdir()
    assert main(["tune", "rccl", "--records", str(tmp_path / "empty")]) != 0
    assert "no tuner-<host>-<pid>.csv record" in capsys.readouterr().err
    assert not (tmp_path / "o" / "collectives.csv").exists()


# --- a tuner configuration named by the recipe ---------------------------------------------------

def test_a_recipe_config_is_copied_and_named_by_nccl_tuner_config_file(rocm,
                                                                       tmp_path: Path) -> None:
    recipe, lock = rocm
    project = tmp_path / "project"
    (project / "tuning").mkdir(parents=True)
    config = tuner_config([SweepPoint("allreduce", 65536, "ring", "ll", 9.5, 1, 8)])
    (project / "tuning" / "nccl_tuner.conf").write_text(config)
    recipe = recipe.with_component("rccl_tuner", replace(TUNER, config="tuning/nccl_tuner.conf"))
    with chosen_project(project):
        plan = plan_for(recipe, lock)
        final = parse_dockerfile(render_dockerfile(plan))["final"].text
        context = build_context(plan, tmp_path / "ctx")
    assert "COPY rccl-tuner.conf /opt/rccl-tuner/nccl_tuner.conf" in final
    assert "NCCL_TUNER_CONFIG_FILE=/opt/rccl-tuner/nccl_tuner.conf" in final
    assert (context.directory / "rccl-tuner.conf").read_text() == config
    assert manifest(plan)["rccl_tuner"]["config"] == "/opt/rccl-tuner/nccl_tuner.conf"
    with chosen_project(project), pytest.raises(
            RenderError, match="env.NCCL_TUNER_CONFIG_FILE: set by imagebuild itself"):
        plan_for(replace(recipe, env=(("NCCL_TUNER_CONFIG_FILE", "/x.conf"),)), lock)


def test_a_missing_config_is_refused_naming_the_key(rocm, tmp_path: Path) -> None:
    recipe, lock = rocm
    recipe = recipe.with_component("rccl_tuner", replace(TUNER, config="tuning/nccl_tuner.conf"))
    with chosen_project(tmp_path), pytest.raises(RenderError) as caught:
        plan_for(recipe, lock)
    assert (f"rccl_tuner.config: {tmp_path / 'tuning' / 'nccl_tuner.conf'} is not a file"
            in str(caught.value))
    assert "imagebuild tune rccl --sweep-results" in str(caught.value)


def test_the_config_key_is_a_relative_path(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="rccl_tuner.config"):
        load_recipe(str(_recipe(tmp_path, SECTION + "  config: ../etc/passwd\n")))
    loaded = load_recipe(str(_recipe(tmp_path, SECTION + "  config: t/a.conf\n")))
    assert rccl_tuner.section(loaded).config == "t/a.conf"  # type: ignore[union-attr]


# --- the EDF -------------------------------------------------------------------------------------

def test_the_committed_edf_names_the_record_switch_and_the_config_the_tuner_reads() -> None:
    """What `imagebuild tune rccl --records DIR` reads is what the adapter writes when a job
    sets the variable the EDF names; the config variable is the one the example reads."""
    adapter = (rccl_tuner.FOLDER / "v4-adapter.c").read_text()
    assert f'getenv("{rccl_tuner.RECORD_ENV}")' in adapter
    text = generated_edf(load_recipe("rocm-7.0.2", REPO), REPO).text
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert any('add IMAGEBUILD_TUNER_RECORD = "DIR" to [env]; then `imagebuild tune rccl '
               '--records DIR`' in line for line in comments)
    assert any("NCCL_TUNER_PLUGIN=/opt/rccl-tuner/lib/librccl-tuner.so; "
               "NCCL_TUNER_CONFIG_FILE: none" in line for line in comments)
    assert "IMAGEBUILD_TUNER_RECORD" not in tomllib.loads(text).get("env", {})
    assert "TUNER" not in generated_edf(load_recipe("rocm-6.4.4", REPO), REPO).text
