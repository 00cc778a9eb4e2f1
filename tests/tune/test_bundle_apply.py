"""Tuning bundle read/write/match and the runtime settings that apply it."""

import json
from dataclasses import replace

import pytest

from imagebuild.errors import TuneError
from imagebuild.inimage.tuning.bundle_format import (
    Bundle,
    BundleProblem,
    Target,
    mismatches,
    ordinal_name,
    write_bundle,
)
from imagebuild.tune.apply import runtime_tuning
from imagebuild.tune.bundle import check_match, read_bundle

GIT = "c7a3b1f2d"


def make_bundle(tmp_path):
    (tmp_path / "hipblaslt_override.txt").write_text(f"Git Version: {GIT}\n")
    (tmp_path / "tunableop_results0.csv").write_text("Validator,PT_VERSION,2.8.0\n")
    bundle = Bundle(image_digest="sha256:" + "a" * 64, recipe="rocm-7.0.2",
                    hipblaslt_git_version=GIT, torch_version="2.8.0+rocm7.0.2",
                    gpu_arch="gfx942:sramecc+:xnack-", cu_count=228,
                    files={"hipblaslt_override": "hipblaslt_override.txt",
                           "tunableop": "tunableop_results.csv"},
                    problems=(BundleProblem(4096, 8192, 14336, 1, "T", "N", "bf16_r", 3100.0,
                                            2950.4, 73211),))
    write_bundle(tmp_path, bundle)
    return bundle


def test_round_trip(tmp_path):
    bundle = make_bundle(tmp_path)
    assert read_bundle(tmp_path) == bundle


def test_refuses_another_gpu_naming_the_field(tmp_path):
    bundle = make_bundle(tmp_path)
    same = Target(bundle.image_digest, GIT, bundle.torch_version, bundle.gpu_arch, 228)
    check_match(bundle, same, tmp_path)
    check_match(bundle, Target(), tmp_path)  # nothing known: nothing to refuse
    mi300x = replace(same, cu_count=304)
    with pytest.raises(TuneError, match=r"cu_count: bundle has 228, target has 304"):
        check_match(bundle, mi300x, tmp_path)
    lines = mismatches(bundle, replace(same, hipblaslt_git_version="0123abc",
                                       gpu_arch="gfx90a:sramecc+:xnack-"))
    assert [line.split(":")[0] for line in lines] == ["hipblaslt_git_version", "gpu_arch"]


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.update(cu_count="228"), r"cu_count: expected an integer, got '228'"),
    (lambda d: d["problems"][0].update(transA="t"), r"problems\[0\]\.transA: expected 'N' or 'T'"),
    (lambda d: d["files"].update(te_algo="missing.csv"), r"files\.te_algo: missing.csv is missing"),
    (lambda d: d["files"].update(other="x"), r"files\.other: unknown kind"),
    (lambda d: d.update(format=9), r"format: expected 1, got 9"),
])
def test_errors_name_the_key_path(tmp_path, edit, message):
    make_bundle(tmp_path)
    data = json.loads((tmp_path / "tuning.json").read_text())
    edit(data)
    (tmp_path / "tuning.json").write_text(json.dumps(data))
    with pytest.raises(TuneError, match=message):
        read_bundle(tmp_path)


def test_runtime_settings(tmp_path):
    bundle = make_bundle(tmp_path)
    settings = runtime_tuning(tmp_path, bundle, "/tuning")
    env = settings.env_dict()
    assert env == {"HIPBLASLT_TUNING_OVERRIDE_FILE": "/tuning/hipblaslt_override.txt",
                   "PYTORCH_TUNABLEOP_ENABLED": "1", "PYTORCH_TUNABLEOP_TUNING": "0",
                   "PYTORCH_TUNABLEOP_FILENAME": "/tuning/tunableop_results.csv"}
    assert settings.mounts[0].source == str(tmp_path.resolve())
    assert settings.mounts[0].read_only
    assert settings.docker_args()[:2] == ["-v", f"{tmp_path.resolve()}:/tuning:ro"]
    assert "--bind" in settings.apptainer_args()
    assert settings.edf_mounts() == [f"{tmp_path.resolve()}:/tuning:ro"]
    # Device d reads the file with its ordinal before the extension.
    assert ordinal_name("tunableop_results.csv", 3) == "tunableop_results3.csv"
    only_te = replace(bundle, files={"te_algo": "algo.csv"})
    assert runtime_tuning(tmp_path, only_te, "/t").env == (("TE_HIPBLASLT_ALGO_LOAD",
                                                            "/t/algo.csv"),)


def test_bundle_from_a_tuner_run(tmp_path):
    from imagebuild.inimage.tuning.bench import override_file_text
    from imagebuild.inimage.tuning.gemm_tuner import bundle_from_run

    row = ",".join(["T", "N", "0", "1", "4096", "8192", "14336"] + ["0"] * 27 + ["73211",
                                                                                  "gfx942", "228"])
    (tmp_path / "hipblaslt_override.txt").write_text(override_file_text(GIT, [row]))
    (tmp_path / "tunableop_results0.csv").write_text("Validator,PT_VERSION,2.8.0\n")
    record = {"facts": {"gpu": "AMD Instinct MI300A", "arch": "gfx942:sramecc+:xnack-",
                        "cu_count": 228, "torch": "2.8.0+rocm7.0.2"},
              "problems": [{"m": "4096", "n": "8192", "k": "14336", "batch_count": "1",
                            "transA": "T", "transB": "N", "a_type": "bf16_r",
                            "before_gflops": 600000.0, "after_us": 2950.4,
                            "solution_index": 73211}]}
    (tmp_path / "gemm_tuning.json").write_text(json.dumps(record))
    bundle = bundle_from_run(tmp_path, "sha256:" + "b" * 64, "rocm-7.0.2", devices=4)
    assert bundle.hipblaslt_git_version == GIT
    assert read_bundle(tmp_path) == bundle
    assert sorted(p.name for p in tmp_path.glob("tunableop_results*.csv")) == \
        [f"tunableop_results{d}.csv" for d in range(4)]
    before = bundle.problems[0].before_us
    assert before == pytest.approx(2 * 4096 * 8192 * 14336 / 600000.0 / 1e3)
