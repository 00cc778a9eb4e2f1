"""Each item of the node screen on node trees (a healthy MI300X node, then one fault
planted), on this machine's own /proc, /dev/shm and /dev/kmsg, and with real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagebuild.inimage.doctor.node import Node
from imagebuild.inimage.screen import gpu_processes, kernel_log, limits, links, smi_latency
from imagebuild.inimage.screen.node_facts import fingerprint_keys, node_facts
from tests.support.screen_trees import BENIGN, GPU_ERRORS, healthy, kmsg, plant, write


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    return healthy(tmp_path)


def test_memlock_unlimited_passes_and_eight_mib_fails(tree: Path) -> None:
    assert limits.check_memlock(Node(tree)).status == "pass"
    plant(tree, "low-memlock")
    finding = limits.check_memlock(Node(tree))
    assert finding.status == "fail" and "8 MiB, below 32 GiB" in finding.reason
    assert limits.check_memlock(Node(tree), 0).status == "skip"


def test_shm_size_from_the_mount_and_half_of_ram_without_one(tree: Path) -> None:
    finding = limits.check_shm(Node(tree))
    assert finding.status == "pass" and "half of MemTotal" in finding.reason
    plant(tree, "small-shm")
    finding = limits.check_shm(Node(tree))
    assert finding.status == "fail" and "64 MiB" in finding.reason, finding


def test_the_mount_rule_agrees_with_statvfs_on_this_machine(tmp_path: Path) -> None:
    """The tree's rule (size= or half of RAM) gives this machine's /dev/shm as statvfs."""
    write(tmp_path, "proc/mounts", Path("/proc/mounts").read_text())
    write(tmp_path, "proc/meminfo", Path("/proc/meminfo").read_text())
    from_tree, how = limits.shm_size(Node(tmp_path))
    live, _ = limits.shm_size(Node("/"))
    assert from_tree is not None and live is not None, how
    assert abs(from_tree - live) <= 4096 * 16, (from_tree, live, how)


def test_this_process_limit_is_what_proc_says() -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    expected = float("inf") if soft == resource.RLIM_INFINITY else float(soft)
    assert limits.memlock_limit(Node("/")) == expected


@pytest.mark.parametrize("kind", sorted(GPU_ERRORS))
def test_each_kernel_log_class_on_a_real_line(tmp_path: Path, kind: str) -> None:
    root = healthy(tmp_path)
    write(root, "dev/kmsg", kmsg([*BENIGN, GPU_ERRORS[kind]]))
    records, problem = kernel_log.read_kmsg(root / "dev/kmsg")
    assert problem is None and len(records) == len(BENIGN) + 1
    assert [h.kind for h in kernel_log.hits(records)] == [kind]
    finding = kernel_log.check(Node(root))
    assert finding.status == "fail" and f"{kind} x1" in finding.reason


def test_benign_lines_and_old_errors_outside_the_window_pass(tree: Path) -> None:
    assert kernel_log.check(Node(tree)).status == "pass"  # "RAS: optional ... not available"
    # The error lies 5 s after boot; uptime is 10 days: the last hour does not hold it.
    write(tree, "dev/kmsg", kmsg([GPU_ERRORS["ring_timeout"], *BENIGN]))
    assert kernel_log.check(Node(tree)).status == "fail"
    assert kernel_log.check(Node(tree), minutes=60).status == "pass"


def test_the_live_kernel_log_is_read_record_by_record() -> None:
    records, problem = kernel_log.read_kmsg(Path("/dev/kmsg"))
    if problem:  # an unprivileged user under dmesg_restrict: the item says so
        assert "not readable" in problem or "no /dev/kmsg" in problem
        return
    assert records and all(r.seconds >= 0 for r in records)
    assert records[0].seconds <= records[-1].seconds


def test_foreign_process_in_the_kfd_list_fails_an_allowed_agent_does_not(tree: Path) -> None:
    (tree / "sys/class/kfd/kfd/proc/77").mkdir()
    write(tree, "proc/77/comm", "gpuagent\n")
    assert gpu_processes.check(Node(tree)).status == "pass"
    plant(tree, "foreign-process")
    finding = gpu_processes.check(Node(tree))
    assert finding.status == "fail"
    assert "pid 4242 python3 (uid 1234): KFD process" in finding.reason
    assert gpu_processes.check(Node(tree), fail=False).status == "warn"


def test_a_process_with_a_gpu_device_open_is_found_through_its_fds(tree: Path) -> None:
    fd = tree / "proc/5151/fd"
    fd.mkdir(parents=True)
    os.symlink("/dev/nvidia3", fd / "7")
    write(tree, "proc/5151/comm", "torchrun\n")
    finding = gpu_processes.check(Node(tree))
    assert finding.status == "fail" and "pid 5151 torchrun: has /dev/nvidia3 open" in finding.reason


def test_a_real_process_holding_a_device_file_is_found_on_the_live_proc(tmp_path: Path) -> None:
    """A real process's fd table read from /proc: its link names the file it holds."""
    holder = subprocess.Popen([sys.executable, "-c", ("import time; f=open('/dev/null'); "
                               "time.sleep(30)")])
    try:
        time.sleep(0.5)
        links_ = {os.readlink(p) for p in Path(f"/proc/{holder.pid}/fd").iterdir()}
        assert "/dev/null" in links_  # the same reading holders() does, on a real process
    finally:
        holder.kill()
        holder.wait()


def test_links_down_and_admin_disabled_ports(tree: Path) -> None:
    assert links.check(Node(tree)).status == "pass"
    assert links.check(Node(tree), expect=4).status == "fail"  # 2 up, 4 expected
    write(tree, "sys/class/infiniband/mlx5_2/ports/1/phys_state", "3: Disabled\n")
    finding = links.check(Node(tree))
    assert finding.status == "pass" and "left out: mlx5_2:1 (3: Disabled)" in finding.reason
    plant(tree, "link-down")
    write(tree, "sys/class/infiniband/mlx5_2/ports/1/phys_state", "5: LinkUp\n")
    assert links.check(Node(tree)).status == "fail"


def test_slingshot_interfaces(tmp_path: Path) -> None:
    root = healthy(tmp_path, shape="mi300a-beverin")
    for nic, state in (("hsn0", "up"), ("hsn1", "down")):
        write(root, f"sys/class/net/{nic}/operstate", f"{state}\n")
    finding = links.check(Node(root))
    assert finding.status == "fail" and "hsn1" in finding.reason and "hsn0" not in finding.reason


def _tool(directory: Path, name: str, seconds: float) -> None:
    script = directory / name
    script.write_text(f"#!/bin/sh\nsleep {seconds}\necho ok\n")
    script.chmod(0o755)


def test_smi_latency_with_a_tool_that_answers_and_one_that_hangs(tmp_path: Path) -> None:
    _tool(tmp_path, "rocm-smi", 0)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    assert smi_latency.check(env).status == "pass"
    _tool(tmp_path, "rocm-smi", 30)
    began = time.monotonic()
    finding = smi_latency.check(env, timeout_s=1)
    assert finding.status == "fail" and "did not answer within 1 s" in finding.reason
    assert time.monotonic() - began < 5
    assert smi_latency.check({"PATH": str(tmp_path / "none")}).status == "skip"


def test_fingerprint_keys(tree: Path) -> None:
    keys = fingerprint_keys(node_facts(tree, {}))
    assert keys["amdgpu"] == "6.8.5" and keys["vbios"] == "113-M3000100-103"
    assert keys["fw.mec"] == "0x00000099" and keys["nic_fw"] == "28.39.1002"
    assert node_facts(tree, {})["name"] == "nid001"
    assert node_facts(tree, {"SLURMD_NODENAME": "nid009"})["name"] == "nid009"
