"""NCCL/RCCL debug logs and the tuner-plugin configuration."""

import csv

import pytest

from imagebuild.errors import TuneError
from imagebuild.tune.rccl import (
    SweepPoint,
    parse_logs,
    parse_rccl_tests,
    tuner_config,
    write_collectives_csv,
)

LOG = """nid002664:106865:106865 [0] NCCL INFO RCCL version : 2.22.3-HEAD:b4b8f8e
nid002664:106865:108086 [0] NCCL INFO ReduceScatter: 302006272 Bytes -> Algo 1 proto 2 time 3628.243652
nid002664:106865:108086 [0] NCCL INFO ReduceScatter: 302006272 Bytes -> Algo 1 proto 2 time 3628.243652
nid002664:106865:106865 [0] NCCL INFO AllGather: 151003136 Bytes -> Algo 1 proto 2 time 0.000000
nid002665:2001:2001 [0] NCCL INFO AllReduce: 4096 Bytes -> Algo TREE proto LL time 12.5
nid002665:2001:2001 [0] NCCL INFO AllReduce: opCount 7 sendbuff 0x7f01 recvbuff 0x7f02 count 1048576 datatype 9 op 0 root 0 comm 0x55 [nranks=8] stream 0x66
"""


def test_parse_numbers_and_names(tmp_path):
    path = tmp_path / "rank0.log"
    path.write_text(LOG)
    records = parse_logs([path])
    by_key = {(r.collective, r.bytes): r for r in records}
    rs = by_key[("reducescatter", 302006272)]
    assert (rs.calls, rs.algorithm, rs.protocol, rs.model_time_us) == (2, "ring", "simple",
                                                                        3628.243652)
    assert by_key[("allgather", 151003136)].algorithm == "ring"
    assert (by_key[("allreduce", 4096)].algorithm, by_key[("allreduce", 4096)].protocol) == \
        ("tree", "ll")
    call = by_key[("allreduce", 1048576 * 2)]  # bfloat16 (datatype 9): 2 bytes
    assert (call.calls, call.nranks, call.algorithm) == (1, 8, "")
    write_collectives_csv(records, tmp_path / "collectives.csv")
    rows = list(csv.DictReader((tmp_path / "collectives.csv").read_text().splitlines()))
    assert len(rows) == 4 and rows[0]["collective"] == "allgather"


def test_bad_algorithm_names_the_line(tmp_path):
    path = tmp_path / "bad.log"
    path.write_text("h:1:1 [0] NCCL INFO AllReduce: 64 Bytes -> Algo 9 proto 0 time 1.0\n")
    with pytest.raises(TuneError, match=r"bad.log:1: algorithm 9"):
        parse_logs([path])
    path.write_text("h:1:1 [0] NCCL INFO Init COMPLETE\n")
    with pytest.raises(TuneError, match="no collective"):
        parse_logs([path])


def test_tuner_config_picks_fastest_and_merges_ranges():
    points = [SweepPoint("allreduce", size, algo, proto, bw, 2, 16)
              for size, algo, proto, bw in [
                  (1024, "tree", "ll", 5.0), (1024, "ring", "simple", 2.0),
                  (65536, "tree", "ll", 20.0), (65536, "ring", "simple", 10.0),
                  (1 << 24, "tree", "ll", 40.0), (1 << 24, "ring", "simple", 80.0),
                  (1 << 28, "ring", "simple", 150.0)]]
    lines = tuner_config(points).splitlines()
    assert lines[0].startswith("# collective_type,min_bytes,max_bytes")
    assert lines[1:] == ["allreduce,0,65536,tree,ll,-1,2,16,-1,-1",
                         f"allreduce,65537,{1 << 28},ring,simple,-1,2,16,-1,-1"]
    with pytest.raises(TuneError, match="unknown algorithm"):
        tuner_config([SweepPoint("allreduce", 8, "fast", "ll", 1.0)])


def test_rccl_tests_output():
    text = """#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    45.12   23.24   40.67      0    44.80   23.41   40.96      0
   268435456      67108864     float     sum      -1   2890.1   92.88  162.54      0   2885.3   93.04  162.82      0
# Avg bus bandwidth    : 101.7
"""
    assert parse_rccl_tests(text) == [(1048576, 40.67), (268435456, 162.54)]
