"""``imagebuild validate --site X``: the site profile fills what the flags leave open, an
explicit flag wins, and the checks are told what the site expects."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from imagebuild.cli import build_parser
from imagebuild.commands.validate import (
    _runner_actions,
    container_env,
    runner_values,
    sbatch_spec,
    site_defaults,
)
from imagebuild.recipe.site_runtime import Bind
from imagebuild.validate.invocation import iter_runner_flags
from imagebuild.validate.site_defaults import expand_refs, present_binds, resolve
from imagebuild.validate.target import Target

SITE = """\
name: testsite
container:
  binds: ["/opt/vendor:/opt/vendor:ro", "${SCRATCH}:${SCRATCH}"]
  env:
    CXI_FORK_SAFE: "1"
    MIOPEN_USER_DB_PATH: "/tmp/${USER}-miopen"
network:
  socket_ifname: "hsn0,hsn1"
  provider: cxi
slurm:
  gpus_per_node: 4
  cpus_per_task: 24
  cpu_bind: "mask_cpu:0xff,0xff00,0xff0000,0xff000000"
  gpu_select: closest
apptainer:
  bind_host_rocm: true
libfabric:
  provided_by: site
  version: "1.22.0"
  library_dir: /opt/vendor/libfabric/lib64
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "sites").mkdir()
    (tmp_path / "sites" / "testsite.yaml").write_text(SITE)
    monkeypatch.setenv("IMAGEBUILD_PROJECT", str(tmp_path))
    monkeypatch.delenv("IMAGEBUILD_SITE", raising=False)
    return tmp_path


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["validate", *argv])


def test_the_site_fills_what_the_flags_leave_open(project: Path) -> None:
    defaults = site_defaults(parse("--site", "testsite"))
    assert defaults.gpus_per_node.value == 4 and defaults.gpus_per_node.source == "site testsite"
    assert defaults.cpus_per_task.value == 24
    assert defaults.cpu_bind.value == "mask_cpu:0xff,0xff00,0xff0000,0xff000000"
    assert defaults.gpu_select.value == "closest"
    assert defaults.socket_ifname.value == "hsn0,hsn1"
    assert defaults.bind_host_rocm.value is True
    assert defaults.expect_net_provider.value == "cxi"
    assert defaults.library_dir == "/opt/vendor/libfabric/lib64"
    assert "cpu-bind mask_cpu:0xff,0xff00,0xff0000,0xff000000 (site testsite)" in \
        defaults.described()


def test_explicit_flags_win_over_the_site(project: Path) -> None:
    defaults = site_defaults(parse(
        "--site", "testsite", "--gpus-per-node", "8", "--cpus-per-task", "7",
        "--cpu-bind", "cores", "--gpu-select", "local-id", "--socket-ifname", "lo",
        "--no-bind-host-rocm", "--expect-net-provider", "tcp"))
    assert defaults.gpus_per_node == type(defaults.gpus_per_node)(8, "flag")
    assert (defaults.cpus_per_task.value, defaults.cpu_bind.value,
            defaults.gpu_select.value, defaults.socket_ifname.value) == (7, "cores", "local-id",
                                                                         "lo")
    assert defaults.bind_host_rocm.value is False and defaults.bind_host_rocm.source == "flag"
    assert defaults.expect_net_provider.value == "tcp"
    assert defaults.described() == []  # nothing came from the site


def test_without_a_site_the_built_in_defaults_apply(project: Path) -> None:
    defaults = site_defaults(parse())
    assert (defaults.gpus_per_node.value, defaults.cpus_per_task.value, defaults.cpu_bind.value,
            defaults.gpu_select.value, defaults.socket_ifname.value,
            defaults.bind_host_rocm.value, defaults.expect_net_provider.value) == (
        8, None, "cores", "local-id", None, False, None)
    assert all(getattr(defaults, n).source == "default"
               for n in ("gpus_per_node", "cpu_bind", "gpu_select"))
    assert defaults.env == {} and defaults.binds == () and defaults.library_dir is None
    # no distribution given: the sbatch job fills one socket before the next
    spec = sbatch_spec(parse())
    assert spec.distribution is None and spec.exclusive is False
    assert spec.task_distribution("rocm") == "block:block"


def test_shipped_sites_bind_their_ranks_as_documented(project: Path) -> None:
    lumi = sbatch_spec(parse("--site", "lumi"))
    assert lumi.exclusive is True and lumi.task_distribution("rocm") is None  # masks
    beverin = sbatch_spec(parse("--site", "cscs-beverin"))
    assert beverin.exclusive is False and beverin.task_distribution("rocm") == "block:cyclic"
    flagged = sbatch_spec(parse("--site", "lumi", "--no-exclusive", "--distribution",
                                "block:block"))
    assert flagged.exclusive is False and flagged.distribution == "block:block"
    env = dict(lumi.site_env)
    assert env["FI_PROVIDER"] == "cxi"  # the batch job pins the provider as the EDF does


def test_the_infiniband_profile_keeps_rccl_on_its_ib_transport(project: Path) -> None:
    """MI300X on InfiniBand/RoCE: NCCL_NET=IB and no libfabric provider pin, so an image's
    Slingshot plugin is never carried over TCP; eight GPUs, ranks in socket blocks, MIOpen
    node-local."""
    spec = sbatch_spec(parse("--site", "mi300x-ib"))
    env = dict(spec.site_env)
    assert env["NCCL_NET"] == "IB" and "FI_PROVIDER" not in env
    assert env["MIOPEN_USER_DB_PATH"].startswith("/tmp/") and env["MIOPEN_DEBUG_DISABLE_SQL_WAL"] == "1"
    assert spec.gpus_per_node == 8 and spec.task_distribution("rocm") == "block:block"
    assert site_defaults(parse("--site", "mi300x-ib")).expect_net_provider.value is None


def test_the_sbatch_job_takes_the_resolved_values(project: Path) -> None:
    spec = sbatch_spec(parse("--site", "testsite", "--cpus-per-task", "12"))
    assert (spec.gpus_per_node, spec.cpus_per_task, spec.cpu_bind, spec.gpu_select,
            spec.socket_ifname) == (4, 12, "mask_cpu:0xff,0xff00,0xff0000,0xff000000",
                                    "closest", "hsn0,hsn1")
    assert ("CXI_FORK_SAFE", "1") in spec.site_env


def test_the_checks_are_told_what_the_site_expects(project: Path) -> None:
    args = parse("--site", "testsite")
    defaults = site_defaults(args)
    sbatch = iter_runner_flags(runner_values(args, defaults, "sbatch"), _runner_actions())
    assert sbatch[sbatch.index("--expect-net-provider") + 1] == "cxi"
    assert "--expect-binding" in sbatch  # srun binds the job's ranks
    docker = iter_runner_flags(runner_values(args, defaults, "docker"), _runner_actions())
    # A container's ranks are started by the runner, unbound: no binding to expect.
    assert "--expect-net-provider" in docker and "--expect-binding" not in docker
    unbound = resolve({"cpu_bind": "none"}, None)
    assert not unbound.expect_binding("sbatch")
    plain = iter_runner_flags(runner_values(parse(), site_defaults(parse()), "sbatch"),
                              _runner_actions())
    assert "--expect-net-provider" not in plain


def test_container_environment_precedence(project: Path) -> None:
    defaults = site_defaults(parse("--site", "testsite"))
    host = {"USER": "alice", "CXI_FORK_SAFE": "0", "NCCL_DEBUG": "WARN", "HOME": "/home/a"}
    env = container_env(defaults, "docker", Target("image", "img"), host)
    # The site's values with ${VAR} expanded here; what the user exported wins.
    assert env["MIOPEN_USER_DB_PATH"] == "/tmp/alice-miopen"
    assert env["CXI_FORK_SAFE"] == "0" and env["NCCL_DEBUG"] == "WARN"
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "hsn0,hsn1"
    assert "HOME" not in env
    local = container_env(defaults, "local", Target("environment"), host)
    assert local["CXI_FORK_SAFE"] == "1"  # the local launcher lays os.environ over it
    # The sbatch script exports the site's values itself (kept for the job's shell).
    assert container_env(defaults, "sbatch", Target("environment"), host) == {}
    assert container_env(defaults, "sbatch", Target("sif", "/x.sif"), host) == {
        "CXI_FORK_SAFE": "0", "NCCL_DEBUG": "WARN"}


def test_binds_missing_on_this_host_are_left_out_and_said(tmp_path: Path) -> None:
    present = tmp_path / "vendor"
    present.mkdir()
    binds = (Bind(str(present), "/opt/vendor", read_only=True),
             Bind("/no/such/dir", "/no/such/dir"), Bind("${SCRATCH}", "${SCRATCH}"))
    kept, skipped = present_binds(binds, {"SCRATCH": str(tmp_path)})
    assert kept == (Bind(str(present), "/opt/vendor", read_only=True),
                    Bind(str(tmp_path), str(tmp_path)))
    assert skipped == [("site bind /no/such/dir:/no/such/dir left out: /no/such/dir is not on "
                       "this host")]
    _, unknown = present_binds((Bind("${NOPE}/x", "/x"),), {})
    assert unknown and "left out" in unknown[0]


def test_reference_expansion_keeps_unknown_names() -> None:
    assert expand_refs("/tmp/${USER}-${SLURM_NODEID}", {"USER": "u"}) == "/tmp/u-${SLURM_NODEID}"


def test_site_comes_from_the_environment_variable(project: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMAGEBUILD_SITE", "testsite")
    assert site_defaults(parse()).site == "testsite"
