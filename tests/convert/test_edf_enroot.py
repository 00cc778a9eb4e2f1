"""An EDF said as enroot options: CSCS's expansion rules, mounts, env, writable. (Run for
real against enroot with the end-to-end image in tests/e2e/test_enroot.py.)"""

from __future__ import annotations

import pytest

from imagebuild.errors import SquashError
from tests.support.edf_enroot import EdfMount, enroot_start, expand

HOST = {"SCRATCH": "/capstor/scratch/u", "HOME": "/users/u", "LD_LIBRARY_PATH": "/host/lib"}
IMAGE = {"LD_LIBRARY_PATH": "/opt/venv/lib", "VIRTUAL_ENV": "/opt/venv"}


def test_expansion_rules() -> None:
    env = {**HOST, **IMAGE}
    assert expand("${SCRATCH}/imagebuild/x.sqsh", env, "w") == "/capstor/scratch/u/imagebuild/x.sqsh"
    assert expand("$$HOME and $HOME stay", env, "w") == "$HOME and $HOME stay"
    assert expand("$${SCRATCH}", env, "w") == "${SCRATCH}"
    assert expand("${UNSET:-}|${UNSET:-fallback}|${HOME:-no}", env, "w") == "|fallback|/users/u"
    with pytest.raises(SquashError, match=r"env.X: \$\{UNSET\} is not defined") as caught:
        expand("${UNSET}/x", env, "env.X")
    assert "${UNSET:-}" in str(caught.value)


def test_image_environment_wins_over_the_host_in_references() -> None:
    start = enroot_start({"image": "/i.sqsh", "env": {"LD_LIBRARY_PATH": "/site:${LD_LIBRARY_PATH}"}},
                         HOST, IMAGE)
    assert start.env == {"LD_LIBRARY_PATH": "/site:/opt/venv/lib"}


def test_a_rendered_edf_becomes_enroot_options() -> None:
    edf = {"image": "${SCRATCH}/imagebuild/demo.sqsh", "writable": True,
           "mounts": ["${SCRATCH}:${SCRATCH}", "/capstor/store:/data:ro"],
           "env": {"NCCL_NET": "AWS Libfabric", "QUOTED": '"kept"'},
           "annotations": {"com": {"hooks": {"cxi": {"enabled": "true"}}}}}
    start = enroot_start(edf, HOST, IMAGE, source="demo.toml")
    assert start.image == "/capstor/scratch/u/imagebuild/demo.sqsh"
    assert start.mounts == (EdfMount("/capstor/scratch/u", "/capstor/scratch/u"),
                            EdfMount("/capstor/store", "/data", ("ro",)))
    assert start.not_applied == ("annotations",)
    assert start.options() == [
        "--rw",
        "--mount", "/capstor/scratch/u:/capstor/scratch/u:none:rbind,x-create=auto",
        "--mount", "/capstor/store:/data:none:rbind,x-create=auto,ro",
        "--env", "NCCL_NET=AWS Libfabric",
        # enroot strips one pair of quotes from such a value: one more pair keeps it
        "--env", 'QUOTED=""kept""',
    ]


def test_read_only_root_has_no_rw_option() -> None:
    start = enroot_start({"image": "/i.sqsh", "writable": False}, HOST, IMAGE)
    assert start.options() == [] and not start.writable


@pytest.mark.parametrize(("edf", "message"), [
    ({"image": "/i.sqsh", "mounts": ["/only-one-path"]}, r"mounts\[0\]: expected SRC:DST"),
    ({"image": "/i.sqsh", "mounts": ["/a:/b:sqsh"]}, r"mount flag\(s\) sqsh have no local"),
    ({"image": "/i.sqsh", "mounts": ["rel:/b"]}, "mount paths must be absolute"),
    ({"image": "/i.sqsh", "writable": "yes"}, "writable: expected true or false"),
    ({"mounts": []}, "image: expected the path of a squashfs file"),
    ({"image": "/i.sqsh", "devices": []}, "unknown EDF key"),
])
def test_what_cannot_be_said_is_an_error(edf: dict, message: str) -> None:
    with pytest.raises(SquashError, match=message):
        enroot_start(edf, HOST, IMAGE, source="x.toml")
