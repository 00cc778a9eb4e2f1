"""Host paths named by validate's flags reach the checks in a container: resolved, checked
before anything starts, bound at the same path (imagebuild/validate/input_binds.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.engine.docker import container_kwargs
from imagebuild.errors import ValidateError
from imagebuild.validate.input_binds import host_path_binds
from imagebuild.validate.invocation import Invocation
from imagebuild.validate.launch_apptainer import apptainer_argv
from imagebuild.validate.launch_container import container_spec
from imagebuild.validate.target import Target


def _args(**values: str | None) -> argparse.Namespace:
    return argparse.Namespace(**{"megatron_dir": None, "megatron_tokenizer_model": None,
                                 **values})


def test_paths_are_resolved_and_bound_where_they_are(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "Megatron-LM").mkdir()
    (tmp_path / "tokenizer.model").write_bytes(b"spm")
    monkeypatch.chdir(tmp_path)
    args = _args(megatron_dir="Megatron-LM", megatron_tokenizer_model="tokenizer.model")
    binds = host_path_binds(args, in_container=True)
    checkout, model = str(tmp_path / "Megatron-LM"), str(tmp_path / "tokenizer.model")
    assert (args.megatron_dir, args.megatron_tokenizer_model) == (checkout, model)
    assert [b.spec() for b in binds] == [f"{checkout}:{checkout}", f"{model}:{model}:ro"]
    invocation = Invocation(launcher="docker", runner_args=("--megatron-dir", checkout),
                            binds=binds)
    volumes = container_kwargs(container_spec(Target("image", "x:1"), invocation))["volumes"]
    assert volumes[checkout] == {"bind": checkout, "mode": "rw"}
    assert volumes[model] == {"bind": model, "mode": "ro"}
    apptainer = apptainer_argv(Target("sif", "/x.sif"), invocation, binary="apptainer")
    assert apptainer[apptainer.index(f"{model}:{model}:ro") - 1] == "--bind"


def test_a_local_run_reads_them_in_place(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.model").write_bytes(b"spm")
    args = _args(megatron_tokenizer_model=str(tmp_path / "tokenizer.model"))
    assert host_path_binds(args, in_container=False) == ()


def test_a_missing_path_is_refused_naming_the_flag(tmp_path: Path, capsys) -> None:
    with pytest.raises(ValidateError, match=r"--megatron-dir nowhere: no such file"):
        host_path_binds(_args(megatron_dir="nowhere"), in_container=True)
    # through the command: refused before any engine, image or doctor is asked anything
    code = main(["validate", "imagebuild/never-built:latest", "--launcher", "docker",
                 "--megatron-tokenizer-model", str(tmp_path / "missing.model")])
    assert code != 0
    err = capsys.readouterr().err
    assert f"--megatron-tokenizer-model {tmp_path / 'missing.model'}: no such file" in err
