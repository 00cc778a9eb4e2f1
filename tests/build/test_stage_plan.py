"""Stage digests of a rendered Dockerfile: what each stage builds on and which context files
it uses, read from the committed Dockerfiles of the shipped recipes."""

from __future__ import annotations

from pathlib import Path

from imagebuild.build.stage_plan import compare, parse_stages, stage_cache_keys, stage_digests
from imagebuild.render.context import BuildContext

REPO = Path(__file__).resolve().parents[2]


def test_the_stages_of_a_shipped_dockerfile_and_what_they_build_on() -> None:
    _, stages = parse_stages((REPO / "dockerfiles" / "rocm-7.0.2" / "Dockerfile").read_text())
    by_name = {s.name: s for s in stages}
    assert by_name["toolchain"].parents == ("base",)
    assert by_name["megatron"].parents[0] == "toolchain" and "python" in by_name["megatron"].parents
    assert {"plugin", "hipblaslt", "python", "megatron"} <= set(by_name["final"].parents)
    assert "pylock.toml" in by_name["python"].context_paths
    assert "checks/" in by_name["final"].context_paths


def _context(tmp_path: Path, dockerfile: str, files: dict[str, str]) -> BuildContext:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "Dockerfile").write_text(dockerfile)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return BuildContext(tmp_path, tmp_path / "Dockerfile", tuple(sorted(files)))


DOCKERFILE = """ARG BASE=debian
FROM debian AS base
RUN echo base
FROM base AS python
ARG SOURCE_DATE_EPOCH
RUN --mount=type=bind,source=pylock.toml,target=/tmp/pylock.toml \\
    echo install
FROM base AS final
COPY --from=python /opt/venv /opt/venv
COPY checks/ /opt/checks/
"""


def test_a_changed_file_rebuilds_its_stage_and_those_after_it(tmp_path: Path) -> None:
    files = {"pylock.toml": "a", "checks/x.py": "1"}
    before = stage_digests(_context(tmp_path / "a", DOCKERFILE, files), {"SOURCE_DATE_EPOCH": "1"})
    after = stage_digests(_context(tmp_path / "b", DOCKERFILE, {**files, "pylock.toml": "b"}),
                          {"SOURCE_DATE_EPOCH": "1"})
    changes = {c.stage: c for c in compare(tmp_path / "b" / "Dockerfile", after, before)}
    assert not changes["base"].rebuilds
    assert changes["python"].rebuilds and changes["python"].why == "its files changed (pylock.toml)"
    assert changes["final"].rebuilds and changes["final"].why == "builds on python, which rebuilds"
    # a build arg counts only in the stages that declare it
    epoch = stage_digests(_context(tmp_path / "c", DOCKERFILE, files), {"SOURCE_DATE_EPOCH": "2"})
    changes = {c.stage: c for c in compare(tmp_path / "c" / "Dockerfile", epoch, before)}
    assert [s for s, c in changes.items() if c.rebuilds] == ["python", "final"]
    assert changes["python"].why == "its instructions or build args changed"
    assert all(c.rebuilds and c.why == "none known" for c in compare(
        tmp_path / "c" / "Dockerfile", epoch, None, "none known"))


def test_cache_keys_leave_the_epoch_out_and_follow_the_target(tmp_path: Path) -> None:
    files = {"pylock.toml": "a", "checks/x.py": "1"}
    keys = stage_cache_keys(_context(tmp_path / "a", DOCKERFILE, files))
    assert list(keys) == ["base", "python", "final"]
    only_from = DOCKERFILE.replace("RUN echo base\n", "")
    assert list(stage_cache_keys(_context(tmp_path / "f", only_from, files))) == \
        ["python", "final"]  # a FROM alone keeps nothing
    # a re-lock moves SOURCE_DATE_EPOCH; the keys, which leave build args out, stay
    assert keys == stage_cache_keys(_context(tmp_path / "b", DOCKERFILE, files))
    assert keys["python"] != stage_digests(_context(tmp_path / "c", DOCKERFILE, files),
                                           {"SOURCE_DATE_EPOCH": "1"})["python"]["stage"]
    changed = stage_cache_keys(_context(tmp_path / "d", DOCKERFILE, {**files, "pylock.toml": "b"}))
    assert changed["base"] == keys["base"] and changed["python"] != keys["python"]
    assert changed["final"] != keys["final"]
    # a stage build makes the stage and those it builds on, nothing after it
    assert list(stage_cache_keys(_context(tmp_path / "e", DOCKERFILE, files), "python")) == \
        ["base", "python"]


def test_the_shared_stages_of_two_shipped_recipes_have_the_same_cache_keys(
        tmp_path: Path) -> None:
    """rocm-7.0.2 and rocm-7.0.2-swiss-ai differ in Megatron-LM: the stages that do not
    build on it name the same registry cache entry. (The committed Dockerfiles are
    unlocked: their plugin stages differ only in the recipe name of the message that asks
    for a lock, which pins the same libfabric for both.)"""
    keys = {}
    for recipe in ("rocm-7.0.2", "rocm-7.0.2-swiss-ai"):
        text = (REPO / "dockerfiles" / recipe / "Dockerfile").read_text()
        keys[recipe] = stage_cache_keys(_context(tmp_path / recipe, text, {}))
    ours, theirs = keys["rocm-7.0.2"], keys["rocm-7.0.2-swiss-ai"]
    assert [s for s in ours if ours[s] == theirs[s]] == \
        ["toolchain", "hipblaslt", "rccl-tests", "rccl-tuner", "python", "transformer-engine"]
    assert ours["megatron"] != theirs["megatron"] and ours["final"] != theirs["final"]
