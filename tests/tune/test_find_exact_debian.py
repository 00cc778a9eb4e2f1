"""The find_exact.py route on the real pieces, up to where only a GPU can go on.

In Debian sid with experimental's real hipBLASLt 7.2.4 bench (libhipblaslt1-bench
7.2.4+dfsg-1~exp1, as tests/components/hipblaslt/test_debian.py installs it) and Debian's
python3-yaml and python3-tqdm (what find_exact.py imports), a hipBLASLt build directory is
laid out as find_exact.py expects it: ``<build dir>/clients/staging/hipblaslt-bench`` (the
real bench) and ``<build dir>/library/MatchTable.yaml`` (a stand-in table: without a GPU no
winner reaches the lookup in it). The image manifest names them (``hipblaslt.tuning_kit``),
as an image's does. There, the in-image ``imagebuild tune`` (this checkout's package, no
torch in the container):

1. reads the Megatron-LM + TransformerEngine trace (fixtures/te-trace) into problems;
2. ``tune gemm --find-exact`` writes one find_exact.py config per problem type and runs the
   real find_exact.py (../shared/fixtures/sources/hipblaslt-find-exact) on each: it parses
   the config, runs the bench once per ``[m, n, batch_count, k]`` row, whose arguments the
   bench accepts and then stops at the missing GPU, and its CreateLogic step reads the
   table and stops for want of a winner.

The same real find_exact.py refuses a bf16 config (its dataType2Bench has no B), which is
why `--find-exact` refuses one before running it, naming the script's data types.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from imagebuild.inimage.tuning.find_exact import Settings, write_configs
from imagebuild.inimage.tuning.problems import read_csv
from testbed import base_images
from testbed.source_mirror import fixtures_dir
from tests.components.hipblaslt.test_debian import DEBIAN_BENCH, HIPBLASLT, RUNTIME
from tests.support.engine_env import docker_engine  # noqa: F401  (pytest fixture)

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TRACE = Path(__file__).parent / "fixtures" / "te-trace"
BUILD_DIR = "/opt/hipblaslt/tuning/build/release"
#: CreateLogic's table maps a global solution index to (logic YAML, local index).
MATCH_TABLE = "0: [/opt/hipblaslt/logic/a.yaml, 0]\n1: [/opt/hipblaslt/logic/a.yaml, 1]\n"
SCRIPT = r"""
set -e
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" \
    python3 python3-yaml python3-tqdm > /tmp/apt.log || { tail -20 /tmp/apt.log; exit 3; }
B=$BUILD_DIR
mkdir -p $B/clients/staging $B/library
ln -s "$BENCH" $B/clients/staging/hipblaslt-bench
cp /stand-in/MatchTable.yaml $B/library/
cat > /tmp/manifest.json <<EOF
{"hipblaslt": {"enabled": true, "tuning_kit": {"find_exact": "/fe/utilities/find_exact.py",
 "build_dir": "$B"}}}
EOF
export PYTHONPATH=/ib IMAGEBUILD_MANIFEST=/tmp/manifest.json
mkdir /work && cd /work
echo "== shapes"
python3 -m imagebuild.inimage tune shapes --trace /trace/megatron-te1-fp16-step.json \
    --out problems.csv --show 0 2>&1 && echo "rc=0" || echo "rc=$?"
echo "== find-exact"
python3 -m imagebuild.inimage tune gemm problems.csv --find-exact --out bundle 2>&1 \
    && echo "rc=0" || echo "rc=$?"
echo "== files"
ls bundle/find_exact/*/0_Bench/ | sort
echo "== result"
wc -c < bundle/find_exact/TN_hhhh_s/0_Bench/result_TN_HHS_6144x8192x1x4096.txt
echo "== log"
cat bundle/find_exact/TN_hhhh_s/find_exact.log
echo "== record"
cat bundle/gemm_tuning.json
echo "== bf16 refused"
python3 -m imagebuild.inimage tune gemm /stand-in/bf16-problems.csv --find-exact \
    --out bf16 2>&1 && echo "rc=0" || echo "rc=$?"
echo "== bf16 by the script itself"
mkdir /work/bf16-out
python3 /fe/utilities/find_exact.py bf16/find_exact/TN_bbbb_s.yaml $B /work/bf16-out 2>&1 \
    && echo "rc=0" || echo "rc=$?"
"""
BF16_PROBLEMS = ("m,n,k,batch_count,transA,transB,a_type,b_type,c_type,d_type,compute_type,"
                 "count,time_share,time_us,origin\n"
                 "6144,8192,4096,1,T,N,bf16_r,bf16_r,bf16_r,bf16_r,f32_r,2,,,te-gemm\n")


@pytest.fixture(scope="module")
def ran(docker_engine, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:  # noqa: F811
    image = base_images.import_base_image_docker(docker_engine, base_images.SID_EXPERIMENTAL)
    stand_in = tmp_path_factory.mktemp("find-exact-debian")
    (stand_in / "MatchTable.yaml").write_text(MATCH_TABLE)
    (stand_in / "bf16-problems.csv").write_text(BF16_PROBLEMS)
    find_exact = fixtures_dir() / "hipblaslt-find-exact"
    assert (find_exact / "utilities" / "find_exact.py").is_file(), find_exact
    done = subprocess.run(
        ["docker", "run", "--rm", "--network", "host",
         "-v", f"{find_exact}:/fe:ro", "-v", f"{TRACE}:/trace:ro",
         "-v", f"{stand_in}:/stand-in:ro", "-v", f"{REPO / 'imagebuild'}:/ib/imagebuild:ro",
         "-e", f"BENCH={DEBIAN_BENCH}", "-e", f"BUILD_DIR={BUILD_DIR}",
         image, "bash", "-c", SCRIPT, "install", *HIPBLASLT, *RUNTIME],
        capture_output=True, text=True, timeout=1500, check=False)
    assert done.returncode == 0, (done.stdout[-4000:], done.stderr[-3000:])
    print("\n" + done.stdout[-6000:])
    sections = done.stdout.split("== ")
    return {s.split("\n", 1)[0]: s.split("\n", 1)[1] for s in sections[1:]}


def expected_sizes(tmp_path: Path) -> dict[str, set[str]]:
    """The result files find_exact.py names for the configs `--find-exact` writes from the
    trace: result_<TA><TB>_<type>_<m>x<n>x<batch>x<k>.txt, per config."""
    problems = tmp_path / "problems.csv"
    subprocess.run(["python3", "-m", "imagebuild", "tune", "shapes", "--trace",
                    str(TRACE / "megatron-te1-fp16-step.json"), "--out", str(problems)],
                   cwd=REPO, check=True, capture_output=True)
    configs, refused = write_configs(read_csv(problems), tmp_path / "configs",
                                     Settings(20, 100, 512, "test"), "test")
    assert refused == []
    gemm_type = {"hhhh": "HHS", "hhss": "HSS"}
    return {c.path.stem: {f"result_{c.problem_type.trans_a}{c.problem_type.trans_b}_"
                          f"{gemm_type[''.join(c.problem_type.letters())]}_"
                          f"{m}x{n}x{b}x{k}.txt" for m, n, b, k in c.sizes} for c in configs}


def test_the_trace_becomes_problems_in_the_container(ran: dict[str, str]) -> None:
    assert ran["shapes"].rstrip().endswith("rc=0"), ran["shapes"]
    assert "te_gemm_ops: 24" in ran["shapes"] and "15 problems, 27 calls" in ran["shapes"]


def test_find_exact_runs_the_bench_for_every_row_of_every_config(
        ran: dict[str, str], tmp_path: Path) -> None:
    """find_exact.py named a result file for every [m, n, batch, k] row of each config:
    it parsed the configs as written, rows in its order."""
    listed = {line.strip() for line in ran["files"].splitlines() if line.endswith(".txt")}
    wanted = set().union(*expected_sizes(tmp_path).values())
    assert listed == wanted


def test_the_bench_takes_find_exacts_arguments_and_stops_at_the_gpu(ran: dict[str, str]) -> None:
    """find_exact.py keeps the bench's standard output (empty without a GPU) in the result
    file; what the bench said on standard error follows find_exact.py's own line for that
    size in the log: it took every argument (an unknown one stops it with "Option ... is
    not defined") and stopped creating its hipBLASLt handle, for want of a GPU."""
    assert ran["result"].strip() == "0"
    log = ran["log"].splitlines()
    start = log.index("--Running size: result_TN_HHS_6144x8192x1x4096.txt")
    assert "no ROCm-capable device is detected" in log[start + 1], log[start:start + 3]
    assert "is not defined" not in ran["log"]
    assert log[0] == "Running benchmarks" and "Creating exact logic" in log


def test_the_record_says_where_it_stopped(ran: dict[str, str]) -> None:
    out = ran["find-exact"]
    assert out.rstrip().endswith("rc=1"), out  # nothing tuned without a GPU
    assert "nothing tuned: GPU-only" in out
    record = json.loads(ran["record"])
    method = record["methods"]["find_exact"]
    assert method["script"] == "/fe/utilities/find_exact.py"
    assert method["build_dir"] == BUILD_DIR and method["found_by"] == \
        "the image manifest's tuning kit"
    assert len(method["runs"]) == 4  # TN, NN and NT in fp16, NT into fp32 (wgrad)
    for run in method["runs"]:
        # find_exact.py got past the benches to CreateLogic, which read the table and found
        # no winner in the results
        assert run["exit_code"] != 0
        assert "Winner/ solution index not found" in "\n".join(run["output_tail"]) or \
            "AssertionError" in "\n".join(run["output_tail"]), run
    assert {p["method"] for p in record["problems"]} == {"find_exact"}
    assert len(record["problems"]) == 15
    assert all("no ROCm-capable device" in " ".join(p["error"]) for p in record["problems"])


def test_bf16_is_refused_before_the_script_fails_on_it(ran: dict[str, str]) -> None:
    refused = ran["bf16 refused"]
    assert refused.rstrip().endswith("rc=2"), refused
    assert "TN_bbbb_s.yaml: /fe/utilities/find_exact.py knows the data types FP8, H, S " \
           "(its dataType2Bench), not B" in refused
    itself = ran["bf16 by the script itself"]
    assert itself.rstrip().endswith("rc=1") and "dataType2Bench" in itself
    assert "AssertionError" in itself
