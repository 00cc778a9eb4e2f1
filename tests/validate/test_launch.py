"""Rank, world and rendezvous from torchrun and SLURM variables; Slurm node lists; the sbatch
launcher's batch script and the apptainer command line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from imagebuild.errors import ValidateError
from imagebuild.inimage.gpu_data import UsageError
from imagebuild.inimage.job_rank import detect_launch, expand_nodelist, slurm_default_port
from imagebuild.recipe.site_runtime import Bind
from imagebuild.validate.invocation import LOADER_PREFIX_SCRIPT, Invocation, container_command
from imagebuild.validate.launch_apptainer import apptainer_argv, apptainer_binary
from imagebuild.validate.launch_sbatch import SbatchSpec, sbatch_script, shell_value, write_sbatch
from imagebuild.validate.stage_checks import IMAGE_LIB, IMAGE_PACKAGE
from imagebuild.validate.target import Target
from tests.support.validate import run_imagebuild


@pytest.mark.parametrize(("nodelist", "hosts"), [
    ("nid001", ["nid001"]),
    ("nid[001-004,007]", ["nid001", "nid002", "nid003", "nid004", "nid007"]),
    ("nid[008-010]", ["nid008", "nid009", "nid010"]),
    ("login1,nid[1-2]", ["login1", "nid1", "nid2"]),
    ("nid[001-002],gpu[10-11]-ib", ["nid001", "nid002", "gpu10-ib", "gpu11-ib"]),
    ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
    ("x1000c0s[0-1]b0n0", ["x1000c0s0b0n0", "x1000c0s1b0n0"]),
    ("a,b , c", ["a", "b", "c"]),
])
def test_expand_nodelist(nodelist: str, hosts: list[str]) -> None:
    assert expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize("bad", ["nid[001-", "nid001]", "nid[3-1]", "nid[a-b]", "nid[1,,2]", ""])
def test_expand_nodelist_rejects_malformed_lists(bad: str) -> None:
    with pytest.raises(UsageError):
        expand_nodelist(bad)


def test_torchrun_variables() -> None:
    launch = detect_launch({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3",
                            "MASTER_ADDR": "node7", "MASTER_PORT": "29400"})
    assert launch is not None
    assert (launch.rank, launch.world_size, launch.local_rank) == (3, 8, 3)
    assert (launch.master_addr, launch.master_port, launch.launcher) == ("node7", 29400, "torchrun")


def test_slurm_variables_take_the_first_host_of_the_node_list() -> None:
    launch = detect_launch({"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1",
                            "SLURM_JOB_NODELIST": "nid[004-005,009]", "SLURM_JOB_ID": "123456"})
    assert launch is not None
    assert (launch.rank, launch.world_size, launch.local_rank) == (5, 16, 1)
    assert launch.master_addr == "nid004" and launch.launcher == "slurm"
    assert launch.master_port == slurm_default_port({"SLURM_JOB_ID": "123456"}) == 20000 + 123456 % 20000


def test_slurm_step_node_list_wins_and_master_addr_overrides() -> None:
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "a[1-9]",
           "SLURM_STEP_NODELIST": "a[3-4]"}
    assert detect_launch(env).master_addr == "a3"
    assert detect_launch({**env, "MASTER_ADDR": "head"}).master_addr == "head"


def test_no_launcher_and_bad_values() -> None:
    assert detect_launch({"HOME": "/root"}) is None
    with pytest.raises(UsageError, match="RANK"):
        detect_launch({"RANK": "x", "WORLD_SIZE": "2"})


# ----------------------------------------------------------------------------------------
# The sbatch launcher's script (run for real by test_sbatch_slurm.py)
# ----------------------------------------------------------------------------------------

SHELLCHECK = shutil.which("shellcheck")
LUMI_G_MASKS = ("mask_cpu:0xfe000000000000,0xfe00000000000000,0xfe0000,0xfe000000,0xfe,"
                "0xfe00,0xfe00000000,0xfe0000000000")


def _invocation(gpus: str = "rocm", **kw: Any) -> Invocation:
    fields: dict[str, Any] = {"launcher": "sbatch", "runner_args": ("--allow-cpu",),
                              "gpus": gpus}
    fields.update(kw)
    return Invocation(**fields)


def _shellcheck(script: str, tmp_path: Path) -> None:
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0
    if SHELLCHECK is None:
        pytest.skip("shellcheck is not installed (.ci/setup-system.sh installs it)")
    lint = subprocess.run([SHELLCHECK, str(path)], capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout + script


def test_cpu_script_for_this_environment_binds_two_ranks(tmp_path: Path) -> None:
    checks = tmp_path / "job.checks"
    spec = SbatchSpec(nodes=1, socket_ifname="lo", report_path="/shared/r.json")
    script = sbatch_script(Target("environment"), _invocation("none", python="/venv/bin/python"),
                           spec, checks)
    assert "#SBATCH --ntasks-per-node=2" in script and "#SBATCH --cpus-per-task=1" in script
    assert "--gpus" not in script and "VISIBLE_DEVICES" not in script
    assert "srun --cpus-per-task=1 --cpu-bind=verbose,cores bash -c \"$rank_setup\" " \
           "imagebuild-rank /venv/bin/python -m imagebuild_checks --allow-cpu " \
           "--report \"$report\"" in script
    assert "export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID" in script
    assert "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | awk 'NR == 1')" \
        in script
    assert "export NCCL_SOCKET_IFNAME=lo" in script and "export GLOO_SOCKET_IFNAME=lo" in script
    assert f"export PYTHONPATH={checks}" in script and "report=/shared/r.json" in script
    _shellcheck(script, tmp_path)


def test_gpu_script_one_rank_per_gpu_with_lumi_masks_and_site_env(tmp_path: Path) -> None:
    spec = SbatchSpec(nodes=4, gpus_per_node=8, cpus_per_task=7, cpu_bind=LUMI_G_MASKS,
                      partition="standard-g", account="project_465000000",
                      site_env=(("NCCL_NET_GDR_LEVEL", "PHB"),
                                ("MIOPEN_USER_DB_PATH", "/tmp/${USER}-miopen-${SLURM_NODEID}")),
                      socket_ifname="hsn0,hsn1,hsn2,hsn3", mount_checks=True)
    script = sbatch_script(Target("sif", "/scratch/x.sif"), _invocation(), spec,
                           tmp_path / "job.checks")
    for line in ("#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=8", "#SBATCH --cpus-per-task=7",
                 "#SBATCH --gpus-per-node=8", "#SBATCH --partition=standard-g",
                 "export ROCR_VISIBLE_DEVICES=$SLURM_LOCALID",
                 "export GLOO_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3",
                 'export MIOPEN_USER_DB_PATH="/tmp/${USER}-miopen-${SLURM_NODEID}"',
                 'export NCCL_NET_GDR_LEVEL="PHB"',
                 "runtime=$(command -v apptainer || command -v singularity || echo apptainer)"):
        assert line in script, line
    assert f"--cpu-bind=verbose,{LUMI_G_MASKS} " in script
    # The image's ROCm, not the host's: no --rocm unless asked for; this checkout's checks
    # bound over the image's copy.
    assert f'"$runtime" exec --bind {tmp_path}/job.checks:{IMAGE_LIB}:ro /scratch/x.sif ' \
           f"python3 -m {IMAGE_PACKAGE} --allow-cpu" in script
    assert "--rocm" not in script
    assert "--rocm" in sbatch_script(Target("sif", "/x.sif"),
                                     _invocation(bind_host_rocm=True), SbatchSpec())
    _shellcheck(script, tmp_path)


def test_container_engine_script_and_slurm_gpu_binding(tmp_path: Path) -> None:
    spec = SbatchSpec(nodes=2, gpus_per_node=4, gpu_select="closest", environment="rocm-7.0.2")
    script = sbatch_script(Target("image", "img"),
                           _invocation(env={"FI_PROVIDER": "cxi", "NCCL_NET": "AWS Libfabric"}),
                           spec)
    assert "#SBATCH --gpus-per-task=1" in script and "--gpus-per-node" not in script
    assert "VISIBLE_DEVICES" not in script
    assert "--gpu-bind=closest --environment=rocm-7.0.2 bash -c" in script
    assert "export NCCL_NET='AWS Libfabric'" in script
    assert f"export PYTHONPATH={IMAGE_LIB}" in script
    assert "#SBATCH --cpus-per-task=7" in script
    _shellcheck(script, tmp_path)
    nvidia = sbatch_script(Target("sif", "/x.sif"), _invocation("nvidia"), SbatchSpec())
    assert "export CUDA_VISIBLE_DEVICES=$SLURM_LOCALID" in nvidia and " exec --nv " in nvidia


def test_site_values_keep_only_variable_references(tmp_path: Path) -> None:
    value = 'a "b" $HOME `id` \\ ${SLURM_JOB_ID}/${USER}'
    line = f"export X={shell_value(value)}\nprintf '%s' \"$X\"\n"
    out = subprocess.run(["bash", "-c", line], capture_output=True, text=True, check=True,
                         env={"SLURM_JOB_ID": "42", "USER": "u", "HOME": "/root", "PATH": "/usr/bin:/bin"})
    assert out.stdout == 'a "b" $HOME `id` \\ 42/u'


def test_ranks_bound_by_cores_fill_one_socket_before_the_next(tmp_path: Path) -> None:
    # SLURM deals a node's tasks round robin over its sockets by default, so rank 1 (GPU 1,
    # on the first socket of a two-socket node) would run on the second socket.
    script = sbatch_script(Target("sif", "/x.sif"), _invocation(), SbatchSpec())
    assert "--cpu-bind=verbose,cores --distribution=block:block " in script
    assert "--exclusive" not in script
    # a site's own distribution wins; masks place each rank themselves
    site = sbatch_script(Target("sif", "/x.sif"), _invocation(),
                         SbatchSpec(distribution="block:cyclic"))
    assert "--distribution=block:cyclic " in site
    masks = sbatch_script(Target("sif", "/x.sif"), _invocation(),
                          SbatchSpec(cpu_bind=LUMI_G_MASKS, exclusive=True))
    assert "--distribution" not in masks
    # masks are valid only on whole nodes
    assert "#SBATCH --exclusive\n" in masks
    cpu = sbatch_script(Target("environment"), _invocation("none"), SbatchSpec(),
                        tmp_path / "job.checks")
    assert "--distribution" not in cpu  # no GPUs to be near
    _shellcheck(masks, tmp_path)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("cpu_bind", "cores; rm -rf /", "--cpu-bind"),
    ("socket_ifname", "lo eth0", "--socket-ifname"),
    ("gpu_select", "any", "--gpu-select"),
    ("ntasks_per_node", 0, "--ntasks-per-node"),
    ("distribution", "block; true", "--distribution"),
])
def test_bad_sbatch_values_are_refused(field: str, value: Any, message: str) -> None:
    with pytest.raises(ValidateError, match=message):
        sbatch_script(Target("sif", "/x.sif"), _invocation(), SbatchSpec(**{field: value}))


def test_write_sbatch_stages_the_checks_beside_the_script(tmp_path: Path) -> None:
    path = write_sbatch(Target("environment"), _invocation("none"), SbatchSpec(),
                        tmp_path / "v.sbatch")
    assert (tmp_path / "v.checks" / IMAGE_PACKAGE / "__main__.py").is_file()
    assert f"export PYTHONPATH={tmp_path}/v.checks" in path.read_text()


def test_apptainer_or_singularity() -> None:
    assert apptainer_binary(lambda name: f"/usr/bin/{name}") == "apptainer"
    assert apptainer_binary(lambda name: "/usr/bin/singularity" if name == "singularity"
                            else None) == "singularity"
    assert apptainer_binary(lambda name: None) == "apptainer"  # its error names apptainer
    rocm = apptainer_argv(Target("sif", "/x.sif"), _invocation(), binary="singularity")
    assert rocm[:3] == ["singularity", "exec", "--env"]
    assert "--rocm" in apptainer_argv(Target("sif", "/x.sif"), _invocation(bind_host_rocm=True))


def test_cli_writes_a_script_for_this_environment(tmp_path: Path) -> None:
    proc = run_imagebuild("validate", "--local", "--launcher", "sbatch", "--gpus", "none",
                          "--nodes", "1", "--socket-ifname", "lo", "--allow-cpu",
                          "--checks", "collectives", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [script] = tmp_path.glob("*.sbatch")
    text = script.read_text()
    assert f"{sys.executable} -m {IMAGE_PACKAGE} --checks collectives --allow-cpu" in text
    refused = run_imagebuild("validate", "--local", "--launcher", "docker", cwd=tmp_path)
    assert refused.returncode == 2 and "--local" in refused.stderr


LUMI_BINDS = (Bind("/opt/cray", "/opt/cray", read_only=True), Bind("/var/spool/slurmd",
              "/var/spool/slurmd"), Bind("/usr/lib64/libcxi.so.1", "/usr/lib64/libcxi.so.1"))
LIBFABRIC = "/opt/cray/libfabric/1.22.0/lib64"


def test_loader_prefix_puts_the_site_libfabric_first(tmp_path: Path) -> None:
    """The prefix runs inside the container after its environment applies: a real sh,
    with and without an image LD_LIBRARY_PATH."""
    command = container_command(_invocation(library_dir=LIBFABRIC, python="python3"))
    assert command[:4] == ["/bin/sh", "-c", LOADER_PREFIX_SCRIPT, LIBFABRIC]
    probe = ["/bin/sh", "-c", LOADER_PREFIX_SCRIPT, LIBFABRIC, "sh", "-c",
             'printf %s "$LD_LIBRARY_PATH"']
    image = subprocess.run(probe, capture_output=True, text=True, check=True,
                           env={"LD_LIBRARY_PATH": "/opt/rocm/lib", "PATH": "/usr/bin:/bin"})
    assert image.stdout == f"{LIBFABRIC}:/opt/rocm/lib"
    bare = subprocess.run(probe, capture_output=True, text=True, check=True,
                          env={"PATH": "/usr/bin:/bin"})
    assert bare.stdout == LIBFABRIC  # no empty entry (the current directory) appended
    assert container_command(_invocation(python="python3"))[0] == "python3"


def test_apptainer_command_line_carries_the_site_binds_and_loader_path() -> None:
    argv = apptainer_argv(Target("sif", "/x.sif"), _invocation(
        binds=LUMI_BINDS, library_dir=LIBFABRIC, env={"CXI_FORK_SAFE": "1"}), binary="apptainer")
    assert argv[:2] == ["apptainer", "exec"] and "--rocm" not in argv
    assert "CXI_FORK_SAFE=1" in argv
    binds = [argv[i + 1] for i, word in enumerate(argv) if word == "--bind"]
    assert binds == ["/opt/cray:/opt/cray:ro", "/var/spool/slurmd:/var/spool/slurmd",
                     "/usr/lib64/libcxi.so.1:/usr/lib64/libcxi.so.1"]
    image = argv.index("/x.sif")
    assert argv[image + 1:image + 5] == ["/bin/sh", "-c", LOADER_PREFIX_SCRIPT, LIBFABRIC]


def test_sbatch_gpu_jobs_in_an_image_run_the_doctor_on_every_node_first(tmp_path: Path) -> None:
    doctor = f"python3 -m {IMAGE_PACKAGE} doctor"
    sif = sbatch_script(Target("sif", "/x.sif"), _invocation(), SbatchSpec())
    edf = sbatch_script(Target("image", "img"), _invocation(), SbatchSpec(environment="rocm-7.2.4"))
    lines = {}
    for name, script in (("sif", sif), ("edf", edf)):
        lines[name] = next(line for line in script.splitlines() if line.endswith(doctor))
        assert lines[name].startswith("srun --ntasks-per-node=1 --cpus-per-task=1 ")
        assert script.index(lines[name]) < script.index('--report "$report"')
        _shellcheck(script, tmp_path)
    assert lines["edf"].endswith(f"--environment=rocm-7.2.4 {doctor}")
    assert '"$runtime" exec ' in lines["sif"] and f"/x.sif {doctor}" in lines["sif"]
    # Not without GPUs, not without an image (no manifest to read), not when asked not to.
    assert doctor not in sbatch_script(Target("sif", "/x.sif"), _invocation("none"), SbatchSpec())
    assert doctor not in sbatch_script(Target("environment"), _invocation(), SbatchSpec(),
                                       checks_dir=tmp_path)
    assert doctor not in sbatch_script(Target("sif", "/x.sif"), _invocation(),
                                       SbatchSpec(doctor=False))


def test_sbatch_sif_job_binds_the_site_and_runs_as_written(tmp_path: Path) -> None:
    """The script's srun line, run by bash with stand-ins for srun and apptainer on PATH:
    the runtime receives the site's binds and the loader prefix word for word."""
    spec = SbatchSpec(nodes=1, gpus_per_node=8, cpus_per_task=7, cpu_bind=LUMI_G_MASKS,
                      socket_ifname="hsn0,hsn1,hsn2,hsn3", report_path=str(tmp_path / "r.json"))
    script = sbatch_script(Target("sif", "/scratch/x.sif"), _invocation(
        binds=(*LUMI_BINDS, Bind("${SCRATCH}", "${SCRATCH}")), library_dir=LIBFABRIC), spec)
    _shellcheck(script, tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "argv.txt"
    (bin_dir / "srun").write_text('#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\n'
                                  'exec "$@"\n')
    (bin_dir / "apptainer").write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" > {record}\n')
    (bin_dir / "scontrol").write_text("#!/bin/bash\necho nid000001\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_NODELIST": "nid000001",
           "SLURM_JOB_ID": "7", "SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_LOCALID": "3",
           "SLURM_CPUS_PER_TASK": "7", "SLURM_SUBMIT_DIR": str(tmp_path),
           "SCRATCH": "/scratch/project"}
    subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, check=True)
    argv = record.read_text().splitlines()
    assert argv[0] == "exec"
    binds = [argv[i + 1] for i, word in enumerate(argv) if word == "--bind"]
    assert binds == ["/opt/cray:/opt/cray:ro", "/var/spool/slurmd:/var/spool/slurmd",
                     "/usr/lib64/libcxi.so.1:/usr/lib64/libcxi.so.1",
                     "/scratch/project:/scratch/project"]  # ${SCRATCH} expanded by the job
    image = argv.index("/scratch/x.sif")
    assert argv[image + 1:image + 6] == ["/bin/sh", "-c", LOADER_PREFIX_SCRIPT, LIBFABRIC,
                                         "python3"]
    assert argv[-2:] == ["--report", str(tmp_path / "r.json")]


def test_sbatch_local_job_puts_the_site_libfabric_first(tmp_path: Path) -> None:
    script = sbatch_script(Target("environment"), _invocation("none", library_dir=LIBFABRIC),
                           SbatchSpec(nodes=1), tmp_path / "job.checks")
    assert f"export LD_LIBRARY_PATH={LIBFABRIC}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" in script
    _shellcheck(script, tmp_path)
