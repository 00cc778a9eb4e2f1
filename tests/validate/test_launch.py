"""Rank, world and rendezvous from torchrun and SLURM variables; Slurm node lists."""

from __future__ import annotations

import pytest

from imagebuild.validate.checks.data import UsageError
from imagebuild.validate.checks.launch import detect_launch, expand_nodelist, slurm_default_port


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
