"""Every command block of README.md and docs/*.md either runs in a test or says what it
needs. A command block is a ```sh block or one whose lines start with ``$ ``; it says what
it needs with a ``# needs: ...`` comment in it; the blocks run by a test are listed here
with the test (or CI script) that runs them, which must exist."""

from __future__ import annotations

import re

import pytest

from tests.support.doc_samples import REPO, fenced_blocks

DOCUMENTS = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]
#: (document, the block's first line, up to its comment) -> what runs it: a test
#: (path::function) or a CI script that contains the command.
RUN_BY = {
    ("README.md", "bash scripts/test-all"): ".ci/run",
    ("docs/development.md", "bash scripts/test-all"): ".ci/run",
    ("README.md", "$ imagebuild doctor rocm-7.2.4 --site lumi --root .../driver-6.3-lumi"):
        "tests/test_readme.py::test_the_doctor_sample_is_what_doctor_prints",
    ("README.md", "imagebuild list"):
        "tests/test_readme.py::test_the_commands_the_readme_runs_here_succeed",
    ("docs/recipes.md", "$ imagebuild list"): "tests/docs/test_samples.py::test_the_recipe_list",
    ("docs/tune.md", "$ imagebuild tune te-file bundle"):
        "tests/tune/test_te_readers.py::test_the_docs_sample_is_what_te_file_prints",
    ("docs/tune.md", "$ L=tests/tune/fixtures/nccl-logs"):
        "tests/docs/test_samples.py::test_the_collectives_from_the_fixture_logs",
    ("docs/validate.md", "$ imagebuild validate"):
        "tests/inimage/doctor/test_before_checks.py::"
        "test_a_node_that_does_not_fit_stops_before_the_checks",
    ("docs/validate.md", ("$ HSA_XNACK=1 imagebuild doctor rocm-6.4.4 --site cscs-beverin "
                         "--root .../xnack-off-beverin")):
        "tests/docs/test_samples.py::test_the_xnack_doctor_sample",
    ("docs/validate.md", "$ imagebuild doctor --root .../two-amd-smi-mi300x"):
        "tests/docs/test_samples.py::test_the_in_image_doctor_sample",
    ("docs/validate.md", ("$ SLURM_JOB_NUM_NODES=2 imagebuild doctor rocm-7.14.1 --site "
                         "cscs-beverin --root .../cumem-enroot-two-nodes-beverin")):
        "tests/docs/test_samples.py::test_the_rccl_p2p_doctor_sample",
    ("docs/validate.md", "$ imagebuild screen --cpu"):
        "tests/validate/test_screen_slurm.py::"
        "test_the_real_node_passes_and_fails_on_its_real_memlock",
    ("docs/validate.md", ("$ python -m imagebuild.inimage --cpu --allow-cpu --no-doctor "
                         "--checks rccl_tests --report -")):
        "tests/docs/test_samples.py::test_the_rccl_tests_skip_outside_an_image",
    ("docs/validate.md", ("$ imagebuild validate --local --cpu --allow-cpu --site ci-node "
                         "--checks gemm,collectives \\")):
        "tests/validate/test_history.py::test_runs_build_a_history_and_report_flags_the_slowed_rank",
}


def command_blocks() -> list[tuple[str, int, list[str]]]:
    return [(document, line, body) for document in DOCUMENTS
            for line, info, body in fenced_blocks(document)
            if body and (info in ("sh", "bash") or any(b.startswith("$ ") for b in body))]


def first_line(body: list[str]) -> str:
    return body[0].split("  #", 1)[0].rstrip()


@pytest.mark.parametrize("document, line, body", command_blocks(),
                         ids=lambda value: value if isinstance(value, (str, int)) else "")
def test_the_block_runs_in_a_test_or_says_what_it_needs(document: str, line: int,
                                                        body: list[str]) -> None:
    needs = any(re.search(r"#\s*needs:\s*\S", b) for b in body)
    run_by = RUN_BY.get((document, first_line(body)))
    assert needs or run_by, (f"{document}:{line}: {body[0]!r} is run by no test and says "
                             "nothing of what it needs (add '# needs: ...' or a test)")


@pytest.mark.parametrize("key, runner", sorted(RUN_BY.items()))
def test_what_runs_a_block_exists(key: tuple[str, str], runner: str) -> None:
    document, first = key
    assert any(d == document and first_line(b) == first for d, _, b in command_blocks()), \
        f"{document}: no command block starts {first!r} any more"
    path, _, function = runner.partition("::")
    text = (REPO / path).read_text()
    if function:
        assert f"def {function}(" in text, f"{runner}: no such test"
    elif path.startswith(".ci/"):
        assert first.lstrip("$ ") in text, f"{path} does not run {first!r}"
