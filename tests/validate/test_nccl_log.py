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


# RCCL's tryOpenDynamicLib line when aws-ofi-rccl, built against libfabric 2.x, meets the
# host's libfabric 1.x (the plugin needs fi_getinfo@FABRIC_1.8).
SYMBOL_VERSION = (
    "nid002001:5150:5150 [0] NCCL INFO NET/Plugin : dlerror=/opt/aws-ofi-rccl/lib/"
    "librccl-net.so: /usr/lib64/libfabric.so.1: version `FABRIC_1.8' not found (required by "
    "/opt/aws-ofi-rccl/lib/librccl-net.so) No plugin found (librccl-net.so), using internal "
    "implementation\n"
    "nid002001:5150:5150 [0] NCCL INFO NET/Socket : Using [0]hsn0:10.100.8.3<0>\n"
    "nid002001:5150:5150 [0] NCCL INFO Using network Socket\n")

PLUGIN_LOAD_RETURNED = (
    "x1000c0s0b0n0:88:88 [0] NCCL INFO NET/Plugin : Plugin load returned 2 : libcxi.so.1: "
    "cannot open shared object file: No such file or directory.\n"
    "x1000c0s0b0n0:88:88 [0] NCCL INFO Using network Socket\n")

TCP_PROVIDER = """\
nid001234:91011:91011 [0] NCCL INFO NET/Plugin: Loaded net plugin AWS Libfabric (v8)
nid001234:91011:91011 [0] NCCL INFO NET/OFI Initializing aws-ofi-rccl 1.4.0
nid001234:91011:91011 [0] NCCL INFO NET/OFI Selected Provider is tcp (found 1 nics)
nid001234:91011:91011 [0] NCCL INFO Using network AWS Libfabric
nid001234:91011:91120 [0] NCCL INFO Channel 00/0 : 3[3] -> 4[0] [send] via NET/AWS Libfabric/0
"""

CXI_NO_GDR = """\
nid001234:91011:91011 [0] NCCL INFO NET/Plugin: Loaded net plugin AWS Libfabric (v8)
nid001234:91011:91011 [0] NCCL INFO NET/OFI Selected Provider is cxi (found 4 nics)
nid001234:91011:91011 [0] NCCL INFO Using network AWS Libfabric
nid001234:91011:91120 [0] NCCL INFO GPU Direct RDMA Disabled for GPU c1000 / HCA 0 (distance 5 > 4)
nid001234:91011:91120 [0] NCCL INFO Channel 00/0 : 3[3] -> 4[0] [send] via NET/AWS Libfabric/0
"""


def test_symbol_version_error_is_named_as_the_cause() -> None:
    from imagebuild.validate.checks.network import judge_log

    summary = parse(SYMBOL_VERSION)
    assert summary.internal_fallback and summary.fell_back_to_socket
    cause = summary.plugin_failure_causes[0]
    assert "symbol version FABRIC_1.8 not found in /usr/lib64/libfabric.so.1" in cause
    assert "required by /opt/aws-ofi-rccl/lib/librccl-net.so" in cause
    problems = judge_log(summary, nodes=2, plugin_expected=True, provider="cxi")
    assert len(problems) == 2
    assert "did not load the network plugin" in problems[0] and "FABRIC_1.8" in problems[0]
    assert "fell back to TCP sockets" in problems[1] and "FABRIC_1.8" in problems[1]


def test_missing_file_and_socket_fallback_on_one_node_only_reports_the_plugin() -> None:
    from imagebuild.validate.checks.network import judge_log

    summary = parse(PLUGIN_LOAD_RETURNED)
    assert summary.plugin_failure_causes == [
        "missing file: libcxi.so.1 (not on the loader's path)"]
    single = judge_log(summary, nodes=1, plugin_expected=True, provider=None)
    assert len(single) == 1 and "libcxi.so.1" in single[0]
    assert judge_log(summary, nodes=1, plugin_expected=False, provider=None) == []


def test_wrong_provider_fails_and_cxi_passes() -> None:
    from imagebuild.validate.checks.network import judge_log

    summary = parse(TCP_PROVIDER)
    assert summary.provider == "tcp" and summary.gdr is None
    problems = judge_log(summary, nodes=2, plugin_expected=True, provider="cxi")
    assert problems == [p for p in problems if "provider 'tcp' selected, expected 'cxi'" in p]
    assert len(problems) == 1
    ofi = parse(OFI_RUN)
    assert ofi.provider == "cxi" and ofi.gdr is True  # the GDRDMA channel
    assert judge_log(ofi, nodes=2, plugin_expected=True, provider="cxi") == []


def test_gdr_disabled_across_nodes_fails() -> None:
    from imagebuild.validate.checks.network import judge_log

    summary = parse(CXI_NO_GDR)
    assert summary.provider == "cxi" and summary.gdr is False
    problems = judge_log(summary, nodes=2, plugin_expected=True, provider="cxi")
    assert len(problems) == 1 and "GPU-direct RDMA is not in use" in problems[0]
    assert judge_log(summary, nodes=1, plugin_expected=True, provider="cxi") == []


def test_expected_provider_comes_from_the_option_or_fi_provider() -> None:
    from types import SimpleNamespace

    from imagebuild.validate.checks.network import expected_provider

    assert expected_provider(SimpleNamespace(expect_net_provider="cxi"), {}) == "cxi"
    assert expected_provider(SimpleNamespace(expect_net_provider=None),
                             {"FI_PROVIDER": "cxi"}) == "cxi"
    assert expected_provider(SimpleNamespace(expect_net_provider=None), {}) is None
