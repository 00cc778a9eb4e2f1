"""benchmarks/squash_bench.py: its record (figures, machine, tools, command) written on a
small image with the real engine and squash tools, the docs' sentence taken from a record,
and a missing --workdir refused with one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.engine_env import base_image, docker_engine  # noqa: F401  (fixtures)

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "squash_bench.py"


def bench(*argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, str(BENCH), *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, check=False, timeout=900)


def load_bench_module():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(BENCH.parent))
    try:
        import squash_bench
    finally:
        sys.path.remove(str(BENCH.parent))
    return squash_bench


def test_a_missing_workdir_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = bench("--workdir", str(tmp_path / "absent"), "--record", str(tmp_path / "rec"))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert f"--workdir {tmp_path / 'absent'}: no such directory" in done.stderr
    assert not list(tmp_path.iterdir())  # no record written


def test_the_docs_sentence_spans_the_records_images() -> None:
    module = load_bench_module()
    record = {"images": [
        {"rounds": 3, "against_enroot": {"faster_best": 6.51, "faster_median": 7.04,
                                         "size_percent": 34.8}},
        {"rounds": 3, "against_enroot": {"faster_best": 4.04, "faster_median": 4.4,
                                         "size_percent": 38.2}}]}
    assert module.against_enroot(record) == (
        "4.0 to 6.5x faster than enroot's method (best of 3; 4.4 to 7.0x by medians) at "
        "35 to 38 % of its size, on 2 image(s)")
    assert module.against_enroot({"images": [{"rounds": 1}]}) is None


@pytest.mark.integration
@pytest.mark.docker
def test_a_small_run_writes_its_record(tmp_path: Path, base_image: str) -> None:  # noqa: F811
    """One round of imagebuild squash and enroot's method on the test's Debian base: the
    record holds both methods' figures, the machine and the tools, and the sentence."""
    work = tmp_path / "work"
    work.mkdir()
    record = tmp_path / "record" / "comparison"
    done = bench("--images", base_image, "--methods", "cli,enroot", "--repeat", "1",
                 "--workdir", str(work), "--record", str(record))
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(record.with_suffix(".json").read_text())
    assert data["command"].startswith("python ") and "--methods cli,enroot" in data["command"]
    machine = data["machine"]
    assert machine["cpus"] == os.cpu_count() and machine["cpu_model"]
    assert len(machine["load_average"]) == 3 and len(machine["load_average_after"]) == 3
    assert data["tools"]["tar2sqfs"].startswith("tar2sqfs")
    assert "mksquashfs" in data["tools"]["mksquashfs"]
    [image] = data["images"]
    assert image["image"] == base_image and image["rounds"] == 1
    cli, enroot = image["methods"]["cli"], image["methods"]["enroot"]
    ratio = image["against_enroot"]
    assert ratio["faster_best"] == pytest.approx(enroot["best_s"] / cli["best_s"], rel=0.01)
    assert data["against_enroot"] == load_bench_module().against_enroot(data)
    text = record.with_suffix(".txt").read_text()
    assert text.startswith(f"# {data['command']}\n")
    assert f"== imagebuild squash (CLI): {data['against_enroot']}" in text
    assert list(work.iterdir()) == []  # its scratch directory is gone


def test_the_docs_quote_the_committed_record_or_no_ratio() -> None:
    """docs/runtimes.md quotes the squash ratio only from the committed record: its sentence
    when there is one, otherwise no "N x faster than enroot" at all, and the record's path."""
    import re

    doc = (REPO / "docs" / "runtimes.md").read_text()
    committed = REPO / "benchmarks" / "results" / "squash" / "comparison.json"
    assert "benchmarks/results/squash/comparison.json" in doc
    if committed.is_file():
        sentence = json.loads(committed.read_text())["against_enroot"]
        assert sentence in " ".join(doc.split())
    else:
        assert not re.search(r"\d(\.\d+)?x (faster|slower)", doc), \
            "a squash ratio in docs/runtimes.md with no committed record behind it"
