"""Which network RCCL/NCCL used, read from NCCL_DEBUG=INFO lines in their real format."""

from __future__ import annotations

from imagebuild.validate.checks.nccl_log import parse, transport_kind

OFI_RUN = """\
nid001234:91011:91011 [0] NCCL INFO Bootstrap : Using hsn0:10.100.4.21<0>
nid001234:91011:91011 [0] NCCL INFO NET/Plugin: Loaded net plugin AWS Libfabric (v8)
nid001234:91011:91011 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.14.0
nid001234:91011:91011 [0] NCCL INFO NET/OFI Using Libfabric version 1.22
nid001234:91011:91011 [0] NCCL INFO NET/OFI Selected provider is cxi, fabric is cxi (found 4 nics)
nid001234:91011:91011 [0] NCCL INFO Using network AWS Libfabric
nid001234:91011:91011 [0] NCCL INFO RCCL version 2.22.3+hip6.4 HEAD:30b2a4b
nid001234:91011:91120 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC
nid001234:91011:91120 [0] NCCL INFO Channel 00/0 : 3[3] -> 4[0] [send] via NET/AWS Libfabric/0/GDRDMA
"""

SOCKET_FALLBACK = """\
nid001234:4242:4242 [0] NCCL INFO NET/Plugin : dlerror=librccl-net.so: cannot open shared object file: No such file or directory No plugin found (librccl-net.so), using internal implementation
nid001234:4242:4242 [0] NCCL INFO NET/IB : No device found.
nid001234:4242:4242 [0] NCCL INFO NET/Socket : Using [0]hsn0:10.100.4.21<0> [1]hsn1:10.100.4.22<0>
nid001234:4242:4242 [0] NCCL INFO Using network Socket
nid001234:4242:4300 [0] NCCL INFO Channel 00/0 : 3[3] -> 4[0] [send] via NET/Socket/0
nid001234:4242:4300 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via SHM/direct/direct
"""

NEW_NCCL_NO_PLUGIN = """\
gpu-a-17:777:777 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
gpu-a-17:777:777 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.
gpu-a-17:777:777 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.17<0>
gpu-a-17:777:777 [0] NCCL INFO Using network IB
gpu-a-17:777:790 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
"""


def test_ofi_plugin_in_use() -> None:
    summary = parse(OFI_RUN)
    assert summary.network == "AWS Libfabric"
    assert not summary.fell_back_to_socket
    assert summary.plugin_loaded == "AWS Libfabric (v8)"
    assert summary.plugin_errors == []
    assert any("provider is cxi" in line for line in summary.ofi)
    assert summary.version == "RCCL version 2.22.3+hip6.4"
    assert summary.transports == ["P2P", "NET/AWS Libfabric"]


def test_socket_fallback_with_the_plugin_missing() -> None:
    summary = parse(SOCKET_FALLBACK)
    assert summary.network == "Socket" and summary.fell_back_to_socket
    assert summary.plugin_loaded is None
    assert "librccl-net.so" in summary.plugin_errors[0]
    assert summary.transports == ["NET/Socket", "SHM"]
    assert any(d.startswith("Socket: [0]hsn0") for d in summary.net_devices)


def test_newer_nccl_without_plugin_uses_ib() -> None:
    summary = parse(NEW_NCCL_NO_PLUGIN)
    assert summary.network == "IB" and not summary.fell_back_to_socket
    assert summary.version == "NCCL version 2.21.5+cuda12.4"
    assert summary.plugin_errors and "Could not find" in summary.plugin_errors[0]
    assert summary.transports == ["P2P"]


def test_plain_libfabric_name_and_noise() -> None:
    text = ("random line\nnode:1:1 [0] NCCL INFO Using network Libfabric\n"
            "node:1:1 [0] NCCL WARN something\n")
    summary = parse(text)
    assert summary.network == "Libfabric" and summary.lines == 2
    assert parse("").network is None


def test_transport_kind() -> None:
    assert transport_kind("P2P/IPC") == "P2P"
    assert transport_kind("NET/Socket/0") == "NET/Socket"
    assert transport_kind("SHM/direct/direct") == "SHM"
