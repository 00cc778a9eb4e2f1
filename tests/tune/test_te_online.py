"""``tune gemm --te CMD``: TE's online tuning saved into the bundle. The command is a
stand-in for a TE training step at the seam (it writes what TE's GemmAlgoCache writes to
TE_HIPBLASLT_ALGO_SAVE); only a GPU with TE shows TE itself doing it."""

import json
import sys

import pytest

from imagebuild.errors import TuneError
from imagebuild.inimage.tuning.bundle_format import read_bundle
from imagebuild.tune.apply import runtime_tuning
from imagebuild.tune.te_algo import LEGENDS, read_te_file

from .test_bundle_apply import make_bundle
from .test_cli import run

ROW = "904,4096,8192,14336,T,N,bfloat16,bfloat16,bfloat16,-,14336,14336,4096,0,-,f32,float32," \
      "0,33554432,{algo},3"
STAND_IN = """import json, os, sys
save, load = os.environ["TE_HIPBLASLT_ALGO_SAVE"], os.environ.get("TE_HIPBLASLT_ALGO_LOAD")
seen = {{k: os.environ.get(k) for k in ("TE_HIPBLASLT_TUNING_RUN_COUNT",
        "TE_HIPBLASLT_TUNING_ALGO_COUNT", "TE_HIPBLASLT_ALGO_LOAD",
        "TE_HIPBLASLT_ALGO_SELECTION")}}
open(sys.argv[1], "w").write(json.dumps(seen))
rows = open(load).read().splitlines()[1:] if load else []
open(save, "w").write("\\n".join([{legend!r}, *rows, {row!r}.format(algo=sys.argv[2])]) + "\\n")
sys.exit(int(sys.argv[3]))
"""


@pytest.fixture()
def stand_in(tmp_path):
    script = tmp_path / "te_step.py"
    script.write_text(STAND_IN.format(legend=LEGENDS["2025"], row=ROW))
    return script


def te(bundle, script, seen, algo, status=0, *flags):
    return run(["gemm", "--out", str(bundle), *flags, "--te",
                f"{sys.executable} {script} {seen} {algo} {status}"])


def test_te_file_saved_into_the_bundle_and_loaded_next_time(tmp_path, stand_in, monkeypatch,
                                                            capsys):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    make_bundle(bundle)
    monkeypatch.setenv("TE_HIPBLASLT_ALGO_SELECTION", "3")  # would skew TE's choice
    seen = tmp_path / "seen.json"
    assert te(bundle, stand_in, seen, 101, 0, "--te-run-count", "10") == 0
    assert json.loads(seen.read_text()) == {
        "TE_HIPBLASLT_TUNING_RUN_COUNT": "10", "TE_HIPBLASLT_TUNING_ALGO_COUNT": "400",
        "TE_HIPBLASLT_ALGO_LOAD": None, "TE_HIPBLASLT_ALGO_SELECTION": None}
    assert "te: 1 tuned GEMMs" in capsys.readouterr().out
    loaded = read_bundle(bundle)
    assert loaded.files["te_algo"] == "te_hipblaslt_algos.csv"
    assert runtime_tuning(bundle, loaded).env_dict()["TE_HIPBLASLT_ALGO_LOAD"] == \
        "/opt/imagebuild/tuning/te_hipblaslt_algos.csv"
    # a second command extends the file: TE loads the bundle's and saves both
    assert te(bundle, stand_in, seen, 102) == 0
    assert json.loads(seen.read_text())["TE_HIPBLASLT_ALGO_LOAD"] == \
        str(bundle / "te_hipblaslt_algos.csv")
    entries, said = read_te_file((bundle / "te_hipblaslt_algos.csv").read_text(), [904])
    assert [e.algo_id for e in entries] == [101]  # TE drops its own overlapping duplicate
    assert said == ["[WARNING] Duplicated/overlapped entry in algo cache"]


def test_a_failed_command_leaves_the_bundle_as_it_was(tmp_path, stand_in):
    make_bundle(tmp_path)
    before = (tmp_path / "tuning.json").read_text()
    with pytest.raises(TuneError, match="exited with 3; the bundle is unchanged"):
        te(tmp_path, stand_in, tmp_path / "seen.json", 101, 3)
    assert (tmp_path / "tuning.json").read_text() == before
    assert sorted(p.name for p in tmp_path.glob("te_hipblaslt*")) == []


def test_a_command_without_te_gemms_is_an_error(tmp_path):
    make_bundle(tmp_path)
    with pytest.raises(TuneError, match="saved no tuned GEMM"):
        run(["gemm", "--out", str(tmp_path), "--te", f"{sys.executable} -c pass"])
    with pytest.raises(TuneError, match="drop the problems CSV"):
        run(["gemm", "problems.csv", "--out", str(tmp_path), "--te", "true"])
