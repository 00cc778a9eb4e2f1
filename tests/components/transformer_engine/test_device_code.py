"""The device-code reader every build-time check shares (buildtime.device_targets) and
TransformerEngine's device-code check, on libraries Debian experimental's ROCm 7.2.4 hipcc
built (fixtures/README.md): a zstd-compressed offload bundle (--offload-compress) and a plain
one, each with code for gfx90a and gfx942."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.components.rccl_tests import component as rccl_tests
from imagebuild.components.transformer_engine import component as transformer_engine
from imagebuild.render.layout import SCRIPTS as SCRIPTS_DIR
from tests.support.scripts import staged

FIXTURES = Path(__file__).parent / "fixtures"
COMPRESSED = FIXTURES / "libscale-compressed.so"
PLAIN = FIXTURES / "libscale-default.so"
TE_CHECK = staged(transformer_engine.CHECK, transformer_engine.FOLDER / "check.py")
RCCL_TESTS_CHECK = staged(rccl_tests.CHECK, rccl_tests.FOLDER / "check.py")
sys.path.insert(0, str(SCRIPTS_DIR))
import buildtime


def test_the_fixture_is_a_zstd_compressed_bundle() -> None:
    fatbin = buildtime.section(str(COMPRESSED), b".hip_fatbin")
    assert fatbin is not None and fatbin[:4] == b"CCOB"
    assert struct.unpack_from("<HH", fatbin, 4) == (3, 1)  # version 3, zstd
    plain = buildtime.section(str(PLAIN), b".hip_fatbin")
    assert plain is not None and plain.startswith(b"__CLANG_OFFLOAD_BUNDLE__")


@pytest.mark.parametrize("library", [COMPRESSED, PLAIN])
def test_the_reader_finds_both_targets(library: Path) -> None:
    assert buildtime.device_targets(str(library)) == {"gfx90a", "gfx942"}


def test_without_a_zstd_codec_the_reader_says_what_it_needs(tmp_path: Path) -> None:
    if sys.version_info >= (3, 14):
        pytest.skip("Python 3.14 reads zstd itself")  # pragma: no cover
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import buildtime\n"
            "try:\n    buildtime.device_targets(sys.argv[2])\n"
            "except ValueError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code, str(SCRIPTS_DIR), str(COMPRESSED)],
                          env={**os.environ, "PATH": str(tmp_path)}, capture_output=True,
                          text=True, check=True)
    assert "needs Python 3.14's compression.zstd or the zstd program" in done.stdout


def test_the_rccl_tests_check_reads_the_compressed_bundle(tmp_path: Path) -> None:
    (tmp_path / "all_reduce_perf").write_bytes(COMPRESSED.read_bytes())
    done = subprocess.run([sys.executable, str(RCCL_TESTS_CHECK), str(tmp_path), "--targets",
                           "gfx90a,gfx942", "--binaries", "all_reduce_perf"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "device code for gfx90a, gfx942" in done.stdout


# --- TransformerEngine's check over installed distributions -----------------------------------

def _distribution(site: Path, name: str, files: dict[str, bytes]) -> None:
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    records = []
    for relative, data in files.items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_bytes(data)
        records.append(f"{relative},,")
    (info / "RECORD").write_text("\n".join(records) + "\n")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """An extension that loads on this host (gcc, no GPU code) and TransformerEngine's common
    library as hipcc built it (compressed device code for gfx90a and gfx942)."""
    source = tmp_path / "ext.c"
    source.write_text("int transformer_engine_torch_probe(void) { return 1; }\n")
    extension = tmp_path / "ext.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(extension), str(source)], check=True)
    site = tmp_path / "site"
    _distribution(site, "transformer_engine_torch",
                  {"transformer_engine_torch.so": extension.read_bytes()})
    _distribution(site, "transformer_engine_rocm",
                  {"transformer_engine/lib/libtransformer_engine.so": COMPRESSED.read_bytes()})
    return site


def _te_check(site: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    return subprocess.run([sys.executable, str(TE_CHECK), "--distribution",
                           "transformer_engine_torch", "--version", "1.0", *args,
                           "--manifest", str(manifest)],
                          env={**os.environ, "PYTHONPATH": str(site)},
                          capture_output=True, text=True, check=False)


def test_the_check_passes_when_every_target_has_code(site: Path, tmp_path: Path) -> None:
    done = _te_check(site, tmp_path, "--targets", "gfx90a,gfx942")
    assert done.returncode == 0, done.stderr
    assert "device code for gfx90a, gfx942" in done.stdout


def test_the_check_fails_for_a_missing_target_naming_it(site: Path, tmp_path: Path) -> None:
    done = _te_check(site, tmp_path, "--targets", "gfx942,gfx950")
    assert done.returncode == 1
    assert "hold no device code for gfx950 (gpu_targets)" in done.stderr
    assert "libtransformer_engine.so: gfx90a, gfx942" in done.stderr
    assert "transformer_engine.missing_targets" in done.stderr


def test_a_target_the_recipe_accepts_missing_passes_and_is_recorded(site: Path,
                                                                    tmp_path: Path) -> None:
    done = _te_check(site, tmp_path, "--targets", "gfx942,gfx950", "--accept-missing", "gfx950")
    assert done.returncode == 0, done.stderr
    code = json.loads((tmp_path / "manifest.json").read_text())["transformer_engine"]["device_code"]
    assert code["targets"] == ["gfx90a", "gfx942"] and code["missing_accepted"] == ["gfx950"]


def test_every_stage_that_reads_device_code_has_zstd(tmp_path: Path) -> None:
    """The rccl-tests stage's check and TransformerEngine's final-stage check read compressed
    bundles with the zstd program: their stages install it."""
    from imagebuild.recipe.load import load_recipe
    from imagebuild.render.plan import plan_for
    from tests.components.conftest import REPO
    from tests.support.render import write_lock

    recipe = load_recipe("rocm-7.2.4", REPO)
    plan = plan_for(recipe, write_lock(recipe, tmp_path / "pylock.rocm-7.2.4.toml"))
    assert "zstd" in plan.parts["rccl_tests"].build_packages
    assert "zstd" in plan.parts["transformer_engine"].runtime_packages
