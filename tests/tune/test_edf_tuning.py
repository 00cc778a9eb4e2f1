"""A tuning bundle applied at run time through an EDF: ``render_edf(tuning=...)`` and
``imagebuild tune edf`` beside a real squashfs, read back the way the Container Engine
applies an EDF (tests.support.edf_enroot: the enroot options it amounts to)."""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import tomllib
from pathlib import Path

import pytest

from imagebuild.commands import tune
from imagebuild.errors import TuneError
from imagebuild.recipe.site import load_site
from imagebuild.render.edf import edf_image_path, render_edf
from imagebuild.tune.apply import runtime_tuning
from imagebuild.tune.bundle import read_bundle
from tests.inimage.checks.test_tuning_in_effect import cpu_bundle
from tests.support.edf_enroot import enroot_start, read_edf

MOUNT = "/opt/imagebuild/tuning"
SITE = "cscs-beverin"
RECIPE = ("version: 1\nrocm: null\nbase_image: debian:bookworm\npython: '3.11'\n"
          "wheels:\n  index_url: http://127.0.0.1:9/\n  packages:\n    torch: 2.13.0\n")


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="imagebuild")
    tune.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["tune", *argv])
    return args.func(args)


def test_render_adds_the_mount_and_the_variables_after_the_site(tmp_path):
    site = load_site(SITE)
    cpu_bundle(tmp_path / "bundle")
    tuning = runtime_tuning(tmp_path / "bundle", read_bundle(tmp_path / "bundle"))
    plain = render_edf(recipe="demo", image="/i.sqsh", site=site, rocm_version="7.0.2")
    tuned = render_edf(recipe="demo", image="/i.sqsh", site=site, rocm_version="7.0.2",
                       tuning=tuning)
    before, after = tomllib.loads(plain), tomllib.loads(tuned)
    source = str((tmp_path / "bundle").resolve())
    assert after["mounts"] == before.get("mounts", []) + [f"{source}:{MOUNT}:ro"]
    assert after["env"] == {**before.get("env", {}), **tuning.env_dict()}
    assert after["annotations"] == before["annotations"]  # the site's hooks stay
    header = [line for line in tuned.splitlines() if line.startswith("#")]
    assert f"# tuning bundle: {source}:{MOUNT}:ro (loaded by the variables " \
           "PYTORCH_TUNABLEOP_ENABLED, PYTORCH_TUNABLEOP_TUNING, " \
           "PYTORCH_TUNABLEOP_FILENAME)" in header
    hashes = [line for text in (plain, tuned) for line in text.splitlines()
              if line.startswith("# input-hash:")]
    assert hashes[0] != hashes[1]
    # What the Container Engine does with it, as enroot options: a read-only bind and
    # the variables over the image's environment.
    start = enroot_start(after, {"HOME": "/home/u", "SCRATCH": "/scratch/u",
                                 "PWD": "/scratch/u/run", "USER": "u"},
                         {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/usr/lib"})
    bundle_mount = next(m for m in start.mounts if m.target == MOUNT)
    assert bundle_mount.source == source and bundle_mount.read_only
    assert f"{source}:{MOUNT}:none:rbind,x-create=auto,ro" in start.options()
    assert start.env["PYTORCH_TUNABLEOP_FILENAME"] == f"{MOUNT}/tunableop_results.csv"


def squashfs(directory: Path, name: str) -> Path:
    """A real (tiny) squashfs image with its sha256 sidecar, as `imagebuild squash` leaves."""
    root = directory / "root"
    (root / "opt").mkdir(parents=True)
    (root / "opt" / "hello").write_text("hello\n")
    image = directory / f"{name}.sqsh"
    subprocess.run(["mksquashfs", str(root), str(image), "-quiet", "-no-progress", "-noappend"], check=True)
    digest = hashlib.sha256(image.read_bytes()).hexdigest()
    (directory / f"{name}.sqsh.sha256").write_text(f"{digest}  {image.name}\n")
    return image


def test_tune_edf_writes_the_tuned_edf_beside_the_squashfs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("IMAGEBUILD_PROJECT", str(tmp_path))
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "cpu-demo.yaml").write_text(RECIPE)
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    image = squashfs(artifacts, "cpu-demo")
    cpu_bundle(tmp_path / "bundle", recipe="cpu-demo")
    assert run(["edf", str(tmp_path / "bundle"), "cpu-demo", "--site", SITE]) == 0
    edf_file = artifacts / "cpu-demo-tuning.toml"
    assert f"edf   {edf_file}" in capsys.readouterr().out
    text = edf_file.read_text()
    edf = read_edf(edf_file)
    assert edf["image"] == edf_image_path(load_site(SITE), image)  # the site's image_dir
    assert f"sha256:{hashlib.sha256(image.read_bytes()).hexdigest()}" in text
    assert f"{(tmp_path / 'bundle').resolve()}:{MOUNT}:ro" in edf["mounts"]
    assert edf["env"]["PYTORCH_TUNABLEOP_TUNING"] == "0"
    assert f"# Regenerate: imagebuild tune edf {tmp_path / 'bundle'} cpu-demo --site {SITE}" \
        in text
    # A .sqsh named directly: the same EDF content for the same image and bundle.
    assert run(["edf", str(tmp_path / "bundle"), str(image), "--site", SITE]) == 0
    assert read_edf(edf_file)["mounts"] == edf["mounts"]


def test_tune_edf_refuses_a_bundle_of_another_recipe(tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_PROJECT", str(tmp_path))
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "cpu-demo.yaml").write_text(RECIPE)
    (tmp_path / "artifacts").mkdir()
    squashfs(tmp_path / "artifacts", "cpu-demo")
    cpu_bundle(tmp_path / "bundle", recipe="rocm-7.1.1")
    with pytest.raises(TuneError, match=r"recipe: bundle has 'rocm-7.1.1', target has "
                                        r"'cpu-demo'"):
        run(["edf", str(tmp_path / "bundle"), "cpu-demo", "--site", SITE])
    assert not (tmp_path / "artifacts" / "cpu-demo-tuning.toml").exists()


def test_tune_edf_needs_the_squashfs_first(tmp_path, monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_PROJECT", str(tmp_path))
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "cpu-demo.yaml").write_text(RECIPE)
    cpu_bundle(tmp_path / "bundle", recipe="cpu-demo")
    with pytest.raises(TuneError, match=r"cpu-demo.sqsh: no squashfs image.*\n"
                                        r"hint: imagebuild squash cpu-demo --site"):
        run(["edf", str(tmp_path / "bundle"), "cpu-demo", "--site", SITE])


def test_a_tuner_config_in_the_bundle_reaches_the_job_through_the_edf(tmp_path, monkeypatch,
                                                                       capsys):
    """`tune rccl --bundle` puts the config beside the GEMM files; the EDF mounts it and
    names it in NCCL_TUNER_CONFIG_FILE, which the image's tuner plugin reads."""
    monkeypatch.setenv("IMAGEBUILD_PROJECT", str(tmp_path))
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "cpu-demo.yaml").write_text(RECIPE)
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    squashfs(artifacts, "cpu-demo")
    bundle_dir = tmp_path / "bundle"
    cpu_bundle(bundle_dir, recipe="cpu-demo")
    sweep = tmp_path / "sweep.csv"
    sweep.write_text("collective,bytes,algorithm,protocol,busbw_gbs,nNodes,nRanks\n"
                     "allreduce,65536,tree,ll,20.0,1,8\n"
                     "allreduce,65536,ring,simple,9.0,1,8\n")
    record = tmp_path / "tuner-n1-7.csv"
    record.write_text("collective,bytes,num_pipe_ops,reg_buff,n_ranks,n_nodes\n"
                      "allreduce,65536,1,0,8,1\n")
    with pytest.raises(TuneError, match="no tuner config to add"):
        run(["rccl", "--bundle", str(bundle_dir), "--records", str(record),
             "--out", str(tmp_path / "rccl")])
    assert not (tmp_path / "rccl").exists()  # refused before any work
    assert run(["rccl", "--sweep-results", str(sweep), "--bundle", str(bundle_dir),
                "--out", str(tmp_path / "rccl")]) == 0
    config = (tmp_path / "rccl" / "nccl_tuner.conf").read_text()
    assert (bundle_dir / "nccl_tuner.conf").read_text() == config
    assert "allreduce,0,65536,tree,ll,-1,1,8,-1,-1" in config
    assert read_bundle(bundle_dir).files["rccl_tuner_config"] == "nccl_tuner.conf"
    capsys.readouterr()
    assert run(["edf", str(bundle_dir), "cpu-demo", "--site", SITE]) == 0
    edf = read_edf(artifacts / "cpu-demo-tuning.toml")
    assert edf["env"]["NCCL_TUNER_CONFIG_FILE"] == f"{MOUNT}/nccl_tuner.conf"
    assert f"{bundle_dir.resolve()}:{MOUNT}:ro" in edf["mounts"]
