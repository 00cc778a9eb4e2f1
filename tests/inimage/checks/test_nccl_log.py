"""Which network RCCL/NCCL used, read from NCCL_DEBUG=INFO lines in their real format."""

from __future__ import annotations

import pytest

from imagebuild.inimage.checks.nccl_log import parse, transport_kind

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
    from imagebuild.inimage.checks.network import judge_log

    summary = parse(SYMBOL_VERSION)
    assert summary.internal_fallback and summary.fell_back_to_socket
    cause = summary.plugin_failure_causes[0]
    assert "symbol version FABRIC_1.8 not found in /usr/lib64/libfabric.so.1" in cause
    assert "required by /opt/aws-ofi-rccl/lib/librccl-net.so" in cause
    problems = judge_log(summary, nodes=2, plugin_expected=True, provider="cxi")
    assert len(problems) == 2
    assert "did not use the network plugin" in problems[0] and "FABRIC_1.8" in problems[0]
    assert "fell back to TCP sockets" in problems[1] and "FABRIC_1.8" in problems[1]


def test_missing_file_and_socket_fallback_on_one_node_only_reports_the_plugin() -> None:
    from imagebuild.inimage.checks.network import judge_log

    summary = parse(PLUGIN_LOAD_RETURNED)
    assert summary.plugin_failure_causes == [
        "missing file: libcxi.so.1 (not on the loader's path)"]
    single = judge_log(summary, nodes=1, plugin_expected=True, provider=None)
    assert len(single) == 1 and "libcxi.so.1" in single[0]
    assert judge_log(summary, nodes=1, plugin_expected=False, provider=None) == []


def test_wrong_provider_fails_and_cxi_passes() -> None:
    from imagebuild.inimage.checks.network import judge_log

    summary = parse(TCP_PROVIDER)
    assert summary.provider == "tcp" and summary.gdr is None
    problems = judge_log(summary, nodes=2, plugin_expected=True, provider="cxi")
    assert problems == [p for p in problems if "provider 'tcp' selected, expected 'cxi'" in p]
    assert len(problems) == 1
    ofi = parse(OFI_RUN)
    assert ofi.provider == "cxi" and ofi.gdr is True  # the GDRDMA channel
    assert judge_log(ofi, nodes=2, plugin_expected=True, provider="cxi") == []


def test_gdr_disabled_across_nodes_fails() -> None:
    from imagebuild.inimage.checks.network import judge_log

    summary = parse(CXI_NO_GDR)
    assert summary.provider == "cxi" and summary.gdr is False
    problems = judge_log(summary, nodes=2, plugin_expected=True, provider="cxi")
    assert len(problems) == 1 and "GPU-direct RDMA is not in use" in problems[0]
    assert judge_log(summary, nodes=1, plugin_expected=True, provider="cxi") == []


def test_expected_provider_comes_from_the_option_or_fi_provider() -> None:
    from types import SimpleNamespace

    from imagebuild.inimage.checks.network import expected_provider

    assert expected_provider(SimpleNamespace(expect_net_provider="cxi"), {}) == "cxi"
    assert expected_provider(SimpleNamespace(expect_net_provider=None),
                             {"FI_PROVIDER": "cxi"}) == "cxi"
    assert expected_provider(SimpleNamespace(expect_net_provider=None), {}) is None


# Real-format lines of each RCCL plugin loader (src/net.cc up to 6.x, src/plugin/*.cc from
# 7.x, https://github.com/ROCm/rccl), for a plugin built against libfabric 2.1 meeting a
# site's 1.22, a missing plugin, one that loads but finds no provider, and a good run.
FABRIC_18 = ("/usr/lib64/libfabric.so.1: version `FABRIC_1.8' not found (required by "
             "/opt/imagebuild/network-plugin/lib/librccl-net.so)")

RCCL_60_SYMBOL = f"""\
nid005001:77:77 [0] NCCL INFO NET/Plugin : Plugin load (librccl-net.so) returned 2 : {FABRIC_18}
nid005001:77:77 [0] NCCL INFO NET/Plugin : No plugin found, using internal implementation
nid005001:77:77 [0] NCCL INFO NET/Socket : Using [0]hsn0:10.100.8.3<0>
nid005001:77:77 [0] NCCL INFO Using network Socket
"""

RCCL_64_SYMBOL = f"""\
nid005001:77:77 [0] NCCL INFO NET/Plugin: No plugin found (librccl-net.so)
nid005001:77:77 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : {FABRIC_18} : when loading librccl-net.so
nid005001:77:77 [0] NCCL INFO NET/Plugin: Using internal network plugin.
nid005001:77:77 [0] NCCL INFO Using network Socket
"""

RCCL_7_SYMBOL = f"""\
nid005001:77:77 [0] NCCL INFO NET/Plugin: {FABRIC_18}
nid005001:77:77 [0] NCCL INFO Initialized NET plugin Socket
nid005001:77:77 [0] NCCL INFO Assigned NET plugin Socket to comm
nid005001:77:77 [0] NCCL INFO Using network Socket
"""

RCCL_72_DEFAULT_NAME = """\
nid005001:77:77 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so.
nid005001:77:77 [0] NCCL INFO Initialized NET plugin Socket
nid005001:77:77 [0] NCCL INFO Using network Socket
"""

RCCL_7_NO_PROVIDER = """\
nid005001:77:77 [0] NCCL INFO Successfully loaded external plugin /opt/imagebuild/network-plugin/lib/librccl-net.so
nid005001:77:77 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.18.0
nid005001:77:77 [0] NCCL INFO NET/OFI No eligible providers were found
[2026-09-17 04:02:30] nid005001:77:77 [0] int nccl_net_ofi_create_plugin(nccl_net_ofi_plugin_t**):334 NCCL WARN NET/OFI Unable to find a protocol that worked.  Failing initialization.
[2026-09-17 04:02:30] nid005001:77:77 [0] int nccl_net_ofi_create_plugin(nccl_net_ofi_plugin_t**):418 NCCL WARN NET/OFI aws-ofi-nccl initialization failed
nid005001:77:77 [0] NCCL INFO Initialized NET plugin Socket
nid005001:77:77 [0] NCCL INFO Using network Socket
"""

RCCL_7_NET_NOT_FOUND = """\
nid006365:180142:180163 [0] NCCL INFO NET/Plugin: Could not find: /opt/imagebuild/network-plugin/lib/librccl-net.so.
nid006365:180142:180163 [0] net.cc:626 NCCL WARN Error: network AWS Libfabric not found.
"""

RCCL_7_GOOD = """\
nid005001:77:77 [0] NCCL INFO NET/Plugin: Plugin name set by env to /opt/imagebuild/network-plugin/lib/librccl-net.so
nid005001:77:77 [0] NCCL INFO Successfully loaded external plugin /opt/imagebuild/network-plugin/lib/librccl-net.so
nid005001:77:77 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.18.0
nid005001:77:77 [0] NCCL INFO NET/OFI Using Libfabric version 1.22
nid005001:77:77 [0] NCCL INFO NET/OFI Selected provider is cxi, fabric is cxi (found 4 nics)
nid005001:77:77 [0] NCCL INFO Initialized NET plugin Libfabric
nid005001:77:77 [0] NCCL INFO Assigned NET plugin Libfabric to comm
nid005001:77:77 [0] NCCL INFO Using network Libfabric
nid005001:77:90 [0] NCCL INFO Channel 00/0 : 3[3] -> 4[0] [send] via NET/Libfabric/0/GDRDMA
"""


@pytest.mark.parametrize("log", [RCCL_60_SYMBOL, RCCL_64_SYMBOL, RCCL_7_SYMBOL],
                         ids=["rccl-6.0", "rccl-6.4", "rccl-7"])
def test_symbol_version_is_the_cause_in_every_release(log: str) -> None:
    from imagebuild.inimage.checks.network import judge_log

    summary = parse(log)
    assert not summary.plugin_in_use
    # A bare "No plugin found" line must not hide the loader's message that follows it.
    cause = summary.primary_cause()
    assert cause is not None and cause.startswith("symbol version FABRIC_1.8 not found in "
                                                  "/usr/lib64/libfabric.so.1")
    for nodes in (1, 2):  # one node too: the plugin the image ships is not the one in use
        problems = judge_log(summary, nodes=nodes, plugin_expected=True, provider="cxi")
        assert problems and "did not use the network plugin" in problems[0]
        assert "FABRIC_1.8" in problems[0] and "'Socket'" in problems[0]
    assert judge_log(summary, nodes=1, plugin_expected=False, provider=None) == []


def test_rccl_72_default_name_is_named_with_the_remedy() -> None:
    summary = parse(RCCL_72_DEFAULT_NAME)
    cause = summary.primary_cause()
    assert cause is not None and "missing file: libnccl-net.so" in cause
    assert "NCCL_NET_PLUGIN" in cause


def test_plugin_without_a_provider_fails_naming_initialisation() -> None:
    from imagebuild.inimage.checks.network import judge_log

    summary = parse(RCCL_7_NO_PROVIDER)
    assert summary.plugin_library == "/opt/imagebuild/network-plugin/lib/librccl-net.so"
    assert not summary.plugin_in_use and summary.ofi_failures
    problems = judge_log(summary, nodes=2, plugin_expected=True, provider="cxi")
    assert "did not initialise" in problems[0] and "No eligible providers" in problems[0]
    assert "fell back to TCP sockets" in problems[1]


def test_nccl_net_naming_a_missing_network_fails_with_the_missing_file() -> None:
    from imagebuild.inimage.checks.network import judge_log

    summary = parse(RCCL_7_NET_NOT_FOUND)
    assert summary.network is None and summary.networks_not_found == ["AWS Libfabric"]
    problems = judge_log(summary, nodes=1, plugin_expected=True, provider="cxi")
    assert len(problems) == 1
    assert "missing file: /opt/imagebuild/network-plugin/lib/librccl-net.so" in problems[0]


def test_the_loaders_own_message_beats_rccl_7s_could_not_find() -> None:
    """RCCL 7 prints "Could not find: <plugin>" when a dependency of the plugin is missing
    (it matches "No such file" in the dlerror); this process's dlopen names the file."""
    from imagebuild.inimage.checks.network import judge_log

    summary = parse(RCCL_7_NET_NOT_FOUND)
    load_error = ("libcxi.so.1: cannot open shared object file: No such file or directory")
    problems = judge_log(summary, nodes=1, plugin_expected=True, provider="cxi",
                         load_error=load_error)
    assert "missing file: libcxi.so.1" in problems[0]


def test_rccl_7_good_run_passes_and_a_wrong_provider_does_not() -> None:
    from imagebuild.inimage.checks.network import judge_log

    summary = parse(RCCL_7_GOOD)
    assert summary.plugin_in_use and summary.plugin_loaded == "Libfabric"
    assert summary.provider == "cxi" and summary.gdr is True
    assert summary.primary_cause() is None
    assert judge_log(summary, nodes=2, plugin_expected=True, provider="cxi") == []
    tcp = parse(RCCL_7_GOOD.replace("provider is cxi, fabric is cxi",
                                    "provider is tcp, fabric is 10.100.0.0/16"))
    problems = judge_log(tcp, nodes=2, plugin_expected=True, provider="cxi")
    assert problems == [("libfabric provider 'tcp' selected, expected 'cxi' (wrong provider: "
                        "check FI_PROVIDER and that the cxi provider is in the libfabric the "
                        "plugin loads)")]


def test_a_communicator_that_could_not_be_created_names_the_cause() -> None:
    from imagebuild.inimage.checks.network import communicator_problem

    summary = parse(RCCL_7_NET_NOT_FOUND)
    problem = communicator_problem("DistBackendError: NCCL error: invalid usage", summary)
    assert problem.startswith("RCCL/NCCL could not create a communicator (DistBackendError")
    assert problem.endswith("missing file: /opt/imagebuild/network-plugin/lib/librccl-net.so "
                            "(not on the loader's path)")
    assert communicator_problem("X: y", parse("")) == \
        "RCCL/NCCL could not create a communicator (X: y)"


def test_the_plugin_over_tcp_fails_without_a_site_profile() -> None:
    # No profile: nothing pinned FI_PROVIDER, and the image's libfabric (tcp, udp, shm)
    # gave the plugin TCP, which aws-ofi-nccl accepts.
    from imagebuild.inimage.checks.network import judge_log

    problems = judge_log(parse(TCP_PROVIDER), nodes=1, plugin_expected=True, provider=None)
    assert len(problems) == 1
    assert "runs over libfabric's 'tcp' provider" in problems[0]
    assert "FI_PROVIDER=cxi" in problems[0] and "NCCL_NET=IB" in problems[0]
    assert judge_log(parse(OFI_RUN), nodes=2, plugin_expected=True, provider=None) == []


def test_a_site_on_rccls_own_transport_does_not_expect_the_plugin() -> None:
    from imagebuild.inimage.checks.network import judge_log, plugin_wanted

    assert plugin_wanted(True, {}) and plugin_wanted(True, {"NCCL_NET": "AWS Libfabric"})
    assert not plugin_wanted(True, {"NCCL_NET": "IB"})
    assert not plugin_wanted(True, {"NCCL_NET": "socket"})
    assert not plugin_wanted(False, {})
    ib = parse(NEW_NCCL_NO_PLUGIN)
    assert judge_log(ib, nodes=2, plugin_expected=plugin_wanted(True, {"NCCL_NET": "IB"}),
                     provider=None) == []
    assert judge_log(ib, nodes=2, plugin_expected=True, provider=None)  # unwanted IB fails
