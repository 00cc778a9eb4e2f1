"""One test per log-signature class, on real log lines (each from the public report or
source named beside it), and lines that must not match any class."""

from __future__ import annotations

import pytest

from imagebuild.inimage.log_signatures import SIGNATURES, classify, errors, scan

REAL_LINES = {
    "nccl_error": [
        # vllm-project/vllm#798
        ("torch.distributed.DistBackendError: NCCL error in: /opt/conda/conda-bld/pytorch_"
        "1682343967769/work/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, internal "
        "error, NCCL version 2.14.3"),
        # NVIDIA/nccl#975
        ("ncclSystemError: System call (e.g. socket, malloc) or external library call failed "
        "or device error."),
        # hiyouga/LlamaFactory#7396
        ("[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, "
        "NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600060 "
        "milliseconds before timing out."),
        # NVIDIA/nccl#975
        ("n122-246-085:12251:12400 [5] misc/socket.cc:483 NCCL WARN socketStartConnect: "
        "Connect to fe80::966d:ae03:a2:8cf0%ib1<17943> failed : Software caused connection "
        "abort"),
    ],
    "nccl_warning": [
        # Lightning-AI/pytorch-lightning#14986
        ("hpc-25-14:18569:18835 [0] bootstrap.cc:131 NCCL WARN Bootstrap Root : rank 1 of 8 "
        "ranks has already checked in"),
    ],
    "gpu_fault": [
        # ROCm/pytorch#797
        ("Memory access fault by GPU node-2 (Agent handle: 0x56468ab3bb50) on address "
        "0x7fe55fb03000. Reason: Page not present or supervisor privilege."),
        # ROCm/legacy-rocm-build#1339
        ("Memory access fault by GPU node-4 (Agent handle: 0x152e220) on address (nil). "
        "Reason: Page not present or supervisor privilege."),
    ],
    "oom": [
        # kyuz0/amd-strix-halo-image-video-toolboxes#3
        ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 3.31 GiB. GPU 0 has a "
        "total capacity of 128.00 GiB of which 780.24 MiB is free. Of the allocated memory "
        "57.70 GiB is allocated by PyTorch, and 75.82 MiB is reserved by PyTorch but "
        "unallocated."),
        # Comfy-Org/ComfyUI#9529
        ("HIP out of memory. Tried to allocate 432.00 MiB. GPU 0 has a total capacity of "
        "15.92 GiB of which 7.12 GiB is free."),
    ],
    "plugin_fallback": [
        # Lightning-AI/pytorch-lightning#14986
        ("hpc-25-15:21476:21476 [2] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), "
        "using internal implementation"),
        # NVIDIA/nccl#207
        "gpu2:46654:46654 [0] NCCL INFO Using internal Network Socket",
    ],
    "cxi_provider": [
        # aws-ofi-rccl (cxi branch) src/nccl_ofi_net.c: "Selected Provider is %s"
        "nid001234:91011:91011 [0] NCCL INFO NET/OFI Selected Provider is cxi",
        # aws-ofi-nccl v1.21.1 src/nccl_ofi_net.cpp: "Selected provider is %s, fabric is %s
        # (found %d nics)"
        ("nid005001:77:77 [0] NCCL INFO NET/OFI Selected provider is cxi, fabric is cxi "
        "(found 4 nics)"),
    ],
}

HARMLESS = [
    # Lightning-AI/pytorch-lightning#14986: a healthy init line
    "hpc-25-15:21476:21476 [2] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB em1:172.18.28.82<0>",
    "hpc-25-14:18622:18622 [1] NCCL INFO Using network IB",
    "nid001234:91011:91011 [0] NCCL INFO NET/OFI Selected Provider is tcp (found 1 nics)",
    " [2026-11-26 01:00:00] iteration        5/       5 | lm loss: 9.000000E+00 |",
]


def test_every_class_has_real_lines() -> None:
    assert set(REAL_LINES) == {s.name for s in SIGNATURES}


@pytest.mark.parametrize(("name", "line"), [(n, line) for n, lines in REAL_LINES.items()
                                            for line in lines])
def test_each_real_line_is_its_class(name: str, line: str) -> None:
    signature = classify(line)
    assert signature is not None and signature.name == name, (line, signature)


@pytest.mark.parametrize("line", HARMLESS)
def test_healthy_lines_are_no_class(line: str) -> None:
    assert classify(line) is None


def test_a_log_scanned_names_errors_with_their_first_line() -> None:
    log = [*HARMLESS, REAL_LINES["nccl_warning"][0], REAL_LINES["oom"][0],
           REAL_LINES["oom"][1], REAL_LINES["cxi_provider"][0]]
    found = scan(log)
    assert found["oom"]["count"] == 2 and found["oom"]["line_number"] == len(HARMLESS) + 2
    assert found["cxi_provider"]["severity"] == "sanity"
    assert errors(found) == [f"oom x2: {REAL_LINES['oom'][0][:200]}"]


def test_the_network_check_reports_classes_and_fails_on_errors() -> None:
    from imagebuild.inimage.checks.network import signature_findings

    healthy = "\n".join([*HARMLESS, REAL_LINES["cxi_provider"][0]])
    figures, problems = signature_findings(healthy)
    assert figures["cscs_sanity_line"] is True and problems == []
    figures, problems = signature_findings(healthy + "\n" + REAL_LINES["nccl_error"][2])
    assert problems == [(f"the NCCL log names a failure: nccl_error x1: "
                        f"{REAL_LINES['nccl_error'][2][:200]}")]
    assert signature_findings("\n".join(HARMLESS))[0]["cscs_sanity_line"] is False
