"""Sample runs in docs/ that this machine can run again, compared with what they print now
(tests/support/doc_samples.py; README.md's are in tests/test_readme.py, te-file's in
tests/tune/test_te_readers.py)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from tests.inimage.doctor.conftest import build_case
from tests.support.doc_samples import REPO, assert_reproduced, run_sample, sample


def clean_env() -> dict[str, str]:
    """This process's environment without what would change a sample's output."""
    return {k: v for k, v in os.environ.items()
            if k not in ("HSA_XNACK", "IMAGEBUILD_SITE", "IMAGEBUILD_MANIFEST", "NCCL_NET")
            and not k.startswith("MIOPEN_")}


def test_the_recipe_list(tmp_path: Path) -> None:
    found = sample("docs/recipes.md", "imagebuild list")
    assert_reproduced(found, run_sample(found, tmp_path, env={"IMAGEBUILD_PROJECT": str(REPO)}))


def test_the_xnack_doctor_sample(tmp_path: Path) -> None:
    found = sample("docs/validate.md", "HSA_XNACK=1 imagebuild doctor")
    case = build_case("xnack-off-beverin", tmp_path)
    assert_reproduced(found, run_sample(found, tmp_path, env={**clean_env(), **case.env}))


def test_the_in_image_doctor_sample(tmp_path: Path) -> None:
    found = sample("docs/validate.md", "imagebuild doctor --root")
    case = build_case("two-amd-smi-mi300x", tmp_path)
    assert_reproduced(found, run_sample(found, tmp_path, env={**clean_env(), **case.env}))


def test_the_rccl_p2p_doctor_sample(tmp_path: Path) -> None:
    found = sample("docs/validate.md", "SLURM_JOB_NUM_NODES=2 imagebuild doctor")
    case = build_case("cumem-enroot-two-nodes-beverin", tmp_path)
    env = {k: v for k, v in clean_env().items() if not k.startswith("SLURM_")}
    assert_reproduced(found, run_sample(found, tmp_path, env={**env, **case.env}))


def test_the_collectives_from_the_fixture_logs(tmp_path: Path) -> None:
    """Run where the sample's relative paths resolve (tests/ beside it) and its output goes
    (tuning/rccl under the run's directory, not the checkout)."""
    found = sample("docs/tune.md", "L=tests/tune/fixtures/nccl-logs")
    (tmp_path / "tests").symlink_to(REPO / "tests")
    assert_reproduced(found, run_sample(found, tmp_path, cwd=tmp_path))
    assert (tmp_path / "tuning" / "rccl" / "collectives.csv").is_file()


def test_the_rccl_tests_skip_outside_an_image(tmp_path: Path) -> None:
    """The sample ran on a machine called vm: this machine's name is written as that."""
    found = sample("docs/validate.md", "python -m imagebuild.inimage --cpu")
    env = {k: v for k, v in clean_env().items() if k != "IMAGEBUILD_RCCL_TESTS_DIR"}
    assert_reproduced(found, run_sample(found, tmp_path, env=env, cwd=tmp_path,
                                        replace={f" on {socket.gethostname()} ": " on vm "}))
