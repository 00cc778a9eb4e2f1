"""Collective sizes from real NCCL/RCCL log lines of each release (fixtures/nccl-logs,
whose README names where each line came from): whole-buffer sizes throughout."""

from pathlib import Path

import pytest

from imagebuild.errors import TuneError
from imagebuild.tune.collective_log import parse_logs

LOGS = Path(__file__).parent / "fixtures" / "nccl-logs"


def sizes(*names, **kwargs):
    return {(r.collective, r.bytes, r.algorithm, r.protocol): r
            for r in parse_logs([LOGS / n for n in names], **kwargs)}


def test_reduce_scatter_count_is_per_rank_like_all_gather():
    # The COLL line is constructed (fixture README): its count 9437696 x float (4 B) x 8
    # ranks was derived from the tuning line's buffer. What this proves is the join: a COLL
    # line and the tuning line of the same call make one collective, not two.
    records = sizes("rccl-beverin-tuning.log")
    assert set(records) == {("reducescatter", 302006272, "ring", "simple"),
                            ("allgather", 151003136, "ring", "simple")}
    rs = records[("reducescatter", 302006272, "ring", "simple")]
    assert (rs.calls, rs.model_time_us, rs.nranks) == (1, 3628.243652, 8)


def test_coll_lines_of_rccl_docs():
    records = sizes("rccl-coll-replayer-doc.log")
    # datatype 6 is half (2 B): AllReduce sizes are the buffer as given
    assert ("allreduce", 268435456 * 2, "", "") in records
    assert ("allreduce", 8, "", "") in records  # count 1 of datatype 8 (double)


def test_nameless_lines_with_an_mpirun_prefix_and_glued_output():
    records = sizes("nccl-2.21-mpirun-nameless.log")
    assert {(c, b) for c, b, _, _ in records} == {("", 4), ("", 256), ("", 512)}
    assert records[("", 512, "tree", "ll")].calls == 2  # one glued to nccl-tests output
    assert records[("", 4, "tree", "ll")].model_time_us == 25.200462
    trimmed = sizes("nccl-nameless-trimmed.log")
    assert trimmed[("", 805306368, "ring", "simple")].calls == 3


def test_launcher_prefixes():
    records = sizes("launcher-prefixes.log")
    assert set(records) == {("reducescatter", 302006272, "ring", "simple"),
                            ("allgather", 151003136, "ring", "simple"),
                            ("", 256, "tree", "ll")}


def test_newest_form_named_by_its_coll_line():
    records = sizes("nccl-2.27-coll-tuning.log")
    assert set(records) == {("allreduce", 4, "ring", "simple")}
    assert records[("allreduce", 4, "ring", "simple")].nranks == 16


def test_newest_form_is_per_rank_and_becomes_the_whole_buffer():
    # AllGather from its COLL line's [nranks=8]; ReduceScatter from the communicator line
    records = sizes("nccl-2.23-per-rank.log")
    assert set(records) == {("allgather", 151003136, "ring", "simple"),
                            ("reducescatter", 151003136, "ring", "simple")}
    assert {r.nranks for r in records.values()} == {8}


def test_per_rank_size_without_a_rank_count(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_text("h:1:1 [0] NCCL INFO ReduceScatter: 4096 Bytes -> Algo RING proto "
                   "SIMPLE channel{Lo..Hi}={0..3}\n")
    with pytest.raises(TuneError, match=r"rank0.log:1: reducescatter .*per-rank") as info:
        parse_logs([log])
    assert "--nranks" in (info.value.hint or "")
    assert parse_logs([log], nranks=4)[0].bytes == 16384


def test_nameless_line_named_by_the_call_before_it(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_text(
        "h:7:7 [0] NCCL INFO AllGather: opCount 1 sendbuff 0x1 recvbuff 0x2 count 1024 "
        "datatype 9 op 0 root 0 comm 0x3 [nranks=4] stream 0x4\n"
        "h:7:9 [0] NCCL INFO 8192 Bytes -> Algo 1 proto 0 time 12.5\n")
    (record,) = parse_logs([log])
    assert (record.collective, record.bytes, record.nranks, record.protocol) == \
        ("allgather", 8192, 4, "ll")
