"""Cache behaviour is part of the contract, proved over the rendered stage graph.

Each test renders a recipe before and after one change, stages both build contexts, and
compares a model of BuildKit's cache keys (tests/support/render.py: a step's key covers its
parent step, its text, the stages it copies from and the context files it reads). A stage
whose last key is unchanged is reused by BuildKit; the tests name exactly which stages a
change rebuilds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagebuild.lock.model import Lock, LockedWheel
from imagebuild.recipe.load import load_recipe
from imagebuild.recipe.model import GitSource, Recipe
from imagebuild.render.context import build_context
from imagebuild.render.dockerfile import render_dockerfile
from imagebuild.render.plan import plan_for
from tests.render.conftest import FIXTURES, REPO
from tests.support.render import (
    cache_keys,
    context_sources,
    depends_on,
    first_changed,
    parse_dockerfile,
    rebuilt,
    stages_read,
    write_lock,
)


class Variant:
    """One rendered recipe with its lock and staged build context."""

    def __init__(self, recipe: Recipe, root: Path, adjust: Callable[[Lock], Lock] | None = None):
        # Same lock file name for every variant: the lock's path is part of what is staged.
        lock_file = root / "recipes" / f"pylock.{recipe.name}.toml"
        lock_file.parent.mkdir(parents=True)
        self.recipe = recipe
        self.lock = write_lock(recipe, lock_file)
        if adjust is not None:
            self.lock = adjust(self.lock)
        self.context = build_context(plan_for(recipe, self.lock), root / "context").directory
        self.text = render_dockerfile(plan_for(recipe, self.lock))
        self.stages = parse_dockerfile(self.text)
        self.keys = cache_keys(self.text, self.context)

    def index(self, stage: str, prefix: str) -> int:
        """1-based position of the first instruction of ``stage`` starting with ``prefix``."""
        for position, instruction in enumerate(self.stages[stage].instructions, start=1):
            if instruction.startswith(prefix):
                return position
        raise AssertionError(f"no {prefix!r} in stage {stage}")

    def seen_by(self, stage: str) -> str:
        """Everything a stage's steps read: their text and the context files they use."""
        parts = []
        for instruction in self.stages[stage].instructions:
            parts.append(instruction)
            for source in context_sources(instruction):
                path = self.context / source
                files = sorted(path.rglob("*")) if path.is_dir() else [path]
                parts += [f.read_text() for f in files if f.is_file()]
        return "\n".join(parts)


@pytest.fixture
def rocm(tmp_path: Path) -> Recipe:
    return load_recipe("rocm-7.0.2", REPO)


def variants(tmp_path: Path, before: Recipe, after: Recipe) -> tuple[Variant, Variant]:
    return Variant(before, tmp_path / "before"), Variant(after, tmp_path / "after")


def with_pin(recipe: Recipe, name: str, version: str) -> Recipe:
    pinned = tuple((n, version if n == name else v) for n, v in recipe.wheels.pinned)
    return replace(recipe, wheels=replace(recipe.wheels, pinned=pinned))


# --- the stage graph ------------------------------------------------------------------------

def test_stage_graph_of_rocm_7_0_2(tmp_path: Path, rocm: Recipe):
    variant = Variant(rocm, tmp_path)
    stages = variant.stages
    assert list(stages) == ["base", "toolchain", "hipblaslt", "plugin", "rccl-tests",
                            "rccl-tuner", "python", "transformer-engine", "megatron", "final"]
    assert stages["base"].base.startswith("rocm/dev-ubuntu-24.04:7.0.2-complete@sha256:")
    assert stages["toolchain"].uses == {"base"}
    assert stages["hipblaslt"].uses == {"toolchain"}
    assert stages["plugin"].uses == {"toolchain"}
    assert stages["rccl-tests"].uses == {"toolchain"}
    assert stages["rccl-tuner"].uses == {"toolchain"}
    # The venv never waits for (or rebuilds with) the compilers.
    assert stages["python"].uses == {"base"}
    # Megatron's helpers and TransformerEngine compile against the venv, mounted from the
    # python stage.
    assert stages["megatron"].uses == {"toolchain", "python"}
    assert stages["transformer-engine"].uses == {"toolchain", "python"}
    assert stages["final"].uses == {"base", "hipblaslt", "plugin", "rccl-tests", "rccl-tuner",
                                    "python", "transformer-engine", "megatron"}
    assert "toolchain" not in stages["final"].uses  # no compilers in the final image
    assert depends_on(stages, "final") == {"base", "toolchain", "hipblaslt", "plugin",
                                           "rccl-tests", "rccl-tuner", "python",
                                           "transformer-engine", "megatron"}


def test_cpu_recipe_has_base_python_final_only(tmp_path: Path):
    variant = Variant(load_recipe("cpu-test", FIXTURES), tmp_path)
    assert list(variant.stages) == ["base", "python", "final"]
    assert variant.stages["final"].uses == {"base", "python"}


def test_recipe_values_reach_only_the_stages_that_use_them(tmp_path: Path, rocm: Recipe):
    recipe = replace(rocm, env=rocm.env + (("SENTINEL_ENV", "env-value-4711"),),
                     labels=rocm.labels + (("org.example.sentinel", "label-value-4712"),),
                     os_packages=rocm.os_packages + ("sentinel-package",))
    variant = Variant(recipe, tmp_path)
    torch = recipe.wheels.version_of("torch")
    where = {stage: variant.seen_by(stage) for stage in variant.stages}
    for value in ("env-value-4711", "label-value-4712", "sentinel-package"):
        assert [s for s, seen in where.items() if value in seen] == ["final"], value
    # The wheel pins reach the python stage (its staged pylock.toml) and the final stage's
    # labels and manifest; never a source build.
    assert [s for s, seen in where.items() if torch in seen] == ["python", "final"]
    assert [s for s, seen in where.items() if "gfx90a;gfx942" in seen] == \
        ["hipblaslt", "transformer-engine"]
    assert variant.lock.git("hipblaslt").commit in where["hipblaslt"]
    assert variant.lock.git("hipblaslt").commit not in where["python"] + where["plugin"]
    assert variant.lock.git("network-plugin").commit in where["plugin"]
    assert variant.lock.archive("libfabric").sha256 in where["plugin"]


# --- what each change rebuilds --------------------------------------------------------------

def test_env_change_rebuilds_no_heavy_stage(tmp_path: Path, rocm: Recipe):
    before, after = variants(tmp_path, rocm, replace(rocm, env=rocm.env + (("NEW", "1"),)))
    assert rebuilt(before.keys, after.keys) == {"final"}
    # Inside final, only the cheap tail re-runs: the copies of the heavy stages are reused.
    assert first_changed(before.keys["final"], after.keys["final"]) >= \
        after.index("final", "COPY manifest.json")


def test_label_change_rebuilds_no_heavy_stage(tmp_path: Path, rocm: Recipe):
    changed = replace(rocm, labels=rocm.labels + (("org.example.site", "cscs"),))
    before, after = variants(tmp_path, rocm, changed)
    assert rebuilt(before.keys, after.keys) == {"final"}
    assert first_changed(before.keys["final"], after.keys["final"]) >= \
        after.index("final", "COPY manifest.json")


def test_wheel_pin_change_rebuilds_neither_hipblaslt_nor_plugin(tmp_path: Path, rocm: Recipe):
    before, after = variants(tmp_path, rocm,
                             with_pin(rocm, "torch", "2.8.0+rocm7.0.2.lw.git12345678"))
    # Megatron's dataset helpers and TransformerEngine are compiled against the venv, so
    # they follow it; the checkouts are reused.
    assert rebuilt(before.keys, after.keys) == {"python", "transformer-engine", "megatron",
                                                "final"}
    assert first_changed(before.keys["transformer-engine"],
                         after.keys["transformer-engine"]) == \
        after.index("transformer-engine", "RUN --mount=type=bind,from=python")
    assert first_changed(before.keys["megatron"], after.keys["megatron"]) == \
        after.index("megatron", "RUN --mount=type=bind,from=python")
    # uv itself is not fetched again: only the venv step re-runs.
    assert first_changed(before.keys["python"], after.keys["python"]) == \
        after.index("python", "RUN --mount=type=cache,id=imagebuild-uv")


def test_gpu_target_change_rebuilds_hipblaslt_not_python(tmp_path: Path, rocm: Recipe):
    before, after = variants(tmp_path, rocm, replace(rocm, gpu_targets=("gfx942",)))
    assert rebuilt(before.keys, after.keys) == {"hipblaslt", "rccl-tests",
                                                "transformer-engine", "final"}
    # The source checkouts are reused; the build steps are the first to re-run.
    for stage in ("hipblaslt", "rccl-tests", "transformer-engine"):
        checkout = after.index(stage, "RUN --mount=type=secret")
        assert first_changed(before.keys[stage], after.keys[stage]) > checkout, stage
    assert "-a gfx942 " in after.stages["hipblaslt"].text
    tests = after.stages["rccl-tests"].text
    assert "--offload-arch=gfx942" in tests and "gfx90a" not in tests


def test_rccl_tests_ref_change_rebuilds_only_rccl_tests(tmp_path: Path, rocm: Recipe):
    tests: Any = rocm.components["rccl_tests"]
    source = GitSource(tests.source.repository, "release/rocm-rel-7.0")
    changed = rocm.with_component("rccl_tests", replace(tests, source=source))
    before, after = variants(tmp_path, rocm, changed)
    assert rebuilt(before.keys, after.keys) == {"rccl-tests", "final"}


def test_rccl_tests_off_drops_its_stage_and_checks(tmp_path: Path, rocm: Recipe):
    changed = rocm.with_component("rccl_tests", None)
    variant = Variant(changed, tmp_path)
    assert "rccl-tests" not in variant.stages
    assert "rccl-tests" not in variant.text and "/opt/rccl-tests" not in variant.text


def test_hipblaslt_ref_change_rebuilds_only_hipblaslt(tmp_path: Path, rocm: Recipe):
    hip: Any = rocm.components["hipblaslt"]
    source = GitSource(hip.source.repository, "rocm-7.0.3")
    changed = rocm.with_component("hipblaslt", replace(hip, source=source))
    before, after = variants(tmp_path, rocm, changed)
    assert rebuilt(before.keys, after.keys) == {"hipblaslt", "final"}


def test_plugin_ref_change_keeps_libfabric(tmp_path: Path, rocm: Recipe):
    plugin: Any = rocm.components["network_plugin"]
    changed = rocm.with_component("network_plugin", replace(
        plugin, source=GitSource(plugin.source.repository, "v1.20.0")))
    before, after = variants(tmp_path, rocm, changed)
    assert rebuilt(before.keys, after.keys) == {"plugin", "final"}
    libfabric_build = after.index("plugin", "RUN ./configure --prefix=/opt/libfabric")
    assert first_changed(before.keys["plugin"], after.keys["plugin"]) > libfabric_build


def test_os_package_change_rebuilds_only_final(tmp_path: Path, rocm: Recipe):
    changed = replace(rocm, os_packages=rocm.os_packages + ("htop",))
    before, after = variants(tmp_path, rocm, changed)
    assert rebuilt(before.keys, after.keys) == {"final"}


def test_base_image_change_rebuilds_everything(tmp_path: Path, rocm: Recipe):
    changed = replace(rocm, base_image="rocm/dev-ubuntu-24.04:7.0.2")
    before, after = variants(tmp_path, rocm, changed)
    assert rebuilt(before.keys, after.keys) == set(after.stages)


def test_cpu_recipe_env_change_keeps_the_venv(tmp_path: Path):
    recipe = load_recipe("cpu-test", FIXTURES)
    before, after = variants(tmp_path, recipe,
                             replace(recipe, env=recipe.env + (("OMP_PROC_BIND", "close"),)))
    assert rebuilt(before.keys, after.keys) == {"final"}
    assert first_changed(before.keys["final"], after.keys["final"]) >= \
        after.index("final", "COPY manifest.json")


def test_a_new_epoch_redates_every_stage_but_recompiles_nothing(tmp_path: Path, rocm: Recipe):
    """A lock of the same pins written at another time has another SOURCE_DATE_EPOCH. The
    final stage is keyed on it (what it writes is dated by it, the venv included); of the
    plugin, hipBLASLt, rccl-tests, tuner and Megatron stages only the last step is, which
    dates their install trees: their compiles come from the cache. The python stage, the
    venv's install, does not see it (the final stage dates the venv as it copies it), nor
    do the base and the toolchain."""
    variant = Variant(rocm, tmp_path)
    before = cache_keys(variant.text, variant.context, {"SOURCE_DATE_EPOCH": "1767225600"})
    after = cache_keys(variant.text, variant.context, {"SOURCE_DATE_EPOCH": "1767312000"})
    assert rebuilt(before, after) == {"hipblaslt", "plugin", "rccl-tests", "rccl-tuner",
                                      "megatron", "final"}
    for stage in ("hipblaslt", "plugin", "rccl-tests", "rccl-tuner", "megatron"):
        steps = variant.stages[stage].instructions
        assert first_changed(before[stage], after[stage]) == len(steps), stage
        assert steps[-2] == "ARG SOURCE_DATE_EPOCH" and steps[-1].startswith("RUN find "), stage
    assert variant.stages["final"].instructions[0] == "ARG SOURCE_DATE_EPOCH"
    assert_copies_follow_the_epoch(variant, before, after)


def python_stages(tmp_path: Path) -> dict[str, Variant]:
    """The python stage in its three shapes: plain (the CPU recipe), with a component's
    step (Megatron's python3-config in rocm-7.0.2) and with the ROCm selector built from
    its sdist (a TheRock recipe, locked with one)."""
    selector = LockedWheel("rocm", "7.14.1", "https://therock.example.org/rocm-7.14.1.tar.gz",
                           "5e" * 32, 12_345)
    return {"plain": Variant(load_recipe("cpu-test", FIXTURES), tmp_path / "plain"),
            "component": Variant(load_recipe("rocm-7.0.2", REPO), tmp_path / "component"),
            "selector": Variant(load_recipe("rocm-7.14.1", REPO), tmp_path / "selector",
                                lambda lock: replace(lock, selector=selector,
                                                     gpu_family="gfx94X-dcgpu"))}


def test_the_venv_install_is_keyed_on_the_locks_packages_not_its_epoch(tmp_path: Path):
    """A re-lock that only moves the epoch must reuse the venv's install (the torch wheels:
    GB). Neither the install step nor anything before it in the python stage names the
    epoch: no ARG declares it (BuildKit puts a declared build arg into every later RUN's
    key), no step expands it, and its value is nowhere in the stage."""
    for shape, variant in python_stages(tmp_path).items():
        steps = variant.stages["python"].instructions
        install = next(n for n, step in enumerate(steps) if "uv pip sync" in step)
        seen = "\n".join(steps[:install + 1])
        assert ("-r /tmp/imagebuild/selector.txt" in steps[install]) == (shape == "selector")
        assert "ARG" not in [step.split()[0] for step in steps], shape
        assert "${SOURCE_DATE_EPOCH" not in seen and "$SOURCE_DATE_EPOCH" not in seen, shape
        assert str(variant.lock.source_date_epoch) not in seen, shape
        before = cache_keys(variant.text, variant.context, {"SOURCE_DATE_EPOCH": "1767225600"})
        after = cache_keys(variant.text, variant.context, {"SOURCE_DATE_EPOCH": "1767312000"})
        assert before["python"] == after["python"], shape
        # What dates the venv is the final stage's copy of it, keyed on the epoch.
        final = variant.stages["final"].instructions
        copy = next(n for n, step in enumerate(final, start=1)
                    if "from=python,target=/mnt" in step
                    and "cp -a /mnt/opt/venv /opt/venv" in step)
        assert 'touch -h -d "@${SOURCE_DATE_EPOCH:-0}"' in final[copy - 1], shape
        assert first_changed(before["final"], after["final"]) <= copy, shape
        assert not any(step.startswith("COPY --from=python") for step in final), shape


def test_the_venv_install_still_follows_its_packages(tmp_path: Path, rocm: Recipe):
    """The other side: a changed pin re-runs the install (and the final stage's copy)."""
    before, after = variants(tmp_path, rocm,
                             with_pin(rocm, "torch", "2.8.0+rocm7.0.2.lw.git12345678"))
    install = after.index("python", "RUN --mount=type=cache,id=imagebuild-uv")
    assert first_changed(before.keys["python"], after.keys["python"]) == install
    assert "final" in rebuilt(before.keys, after.keys)


def test_a_new_epoch_reruns_the_final_copies_without_os_packages(tmp_path: Path):
    """Without OS packages (the demo recipe) the final stage has no package step: a RUN must
    still precede the copies."""
    variant = Variant(replace(load_recipe("cpu-test", FIXTURES), os_packages=()), tmp_path)
    assert "apt-get" not in variant.text
    before = cache_keys(variant.text, variant.context, {"SOURCE_DATE_EPOCH": "1767225600"})
    after = cache_keys(variant.text, variant.context, {"SOURCE_DATE_EPOCH": "1767312000"})
    assert rebuilt(before, after) == {"final"}
    assert_copies_follow_the_epoch(variant, before, after)


def assert_copies_follow_the_epoch(variant: Variant, before: dict[str, list[str]],
                                   after: dict[str, list[str]]) -> None:
    """A COPY --from is keyed on the copied content, which leaves dates out: the final stage
    re-runs from a step before its first copy (COPY --from or a mount of a stage), and no copy is --link (keyed on content
    alone, it would bring back a tree dated by another epoch)."""
    __tracebackhide__ = True
    final = variant.stages["final"].instructions
    first_copy = next(n for n, step in enumerate(final, start=1) if stages_read(step))
    assert first_changed(before["final"], after["final"]) < first_copy
    assert not any("--link" in step for stage in variant.stages.values()
                   for step in stage.instructions)
    # The same epoch again: everything from the cache.
    assert rebuilt(before, cache_keys(variant.text, variant.context,
                                      {"SOURCE_DATE_EPOCH": "1767225600"})) == set()


def test_cache_model_sees_context_content(tmp_path: Path, rocm: Recipe):
    """The model must be able to fail: a changed staged file changes the step that reads it."""
    variant = Variant(rocm, tmp_path)
    pylock = variant.context / "pylock.toml"
    pylock.write_text(pylock.read_text() + "\n# edited\n")
    assert rebuilt(variant.keys, cache_keys(variant.text, variant.context)) == \
        {"python", "transformer-engine", "megatron", "final"}


def test_heavy_stages_come_before_volatile_final_steps(tmp_path: Path, rocm: Recipe):
    """Inside final: the epoch, packages, then the stage copies, then manifest/checks, ENV,
    LABEL."""
    final = Variant(rocm, tmp_path).stages["final"].instructions
    kinds = [i.split()[0] for i in final]
    last_copy_from = max(n for n, i in enumerate(final) if "--from=" in i)
    first_env = kinds.index("ENV")
    assert final[0] == "ARG SOURCE_DATE_EPOCH"
    assert kinds[1] == "RUN" and "apt-get install" in final[1]
    assert last_copy_from < first_env
    assert all(k == "LABEL" for k in kinds[kinds.index("LABEL"):])
    assert set(kinds[first_env:kinds.index("LABEL")]) == {"ENV"}
