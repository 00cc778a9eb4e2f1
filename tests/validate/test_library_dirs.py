"""A site library directory naming its release with ``*`` is the newest release the node
has: resolved the same by the job's shell (sort -V) and by the host launchers and doctor."""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from imagebuild.errors import SquashError
from imagebuild.inimage.library_dirs import newest_dir
from imagebuild.recipe import grammar
from imagebuild.recipe.site import load_site
from imagebuild.render.edf import edf_env
from imagebuild.validate.invocation import LOADER_PREFIX_SCRIPT

RELEASES = ("1.9.0", "1.15.2.0", "1.22.0", "1.22.0-rc1")


@pytest.fixture
def cray(tmp_path: Path) -> Path:
    for release in RELEASES:
        (tmp_path / "opt" / "cray" / "libfabric" / release / "lib64").mkdir(parents=True)
    return tmp_path


def test_the_job_shell_and_python_pick_the_same_newest_release(cray: Path) -> None:
    pattern = f"{cray}/opt/cray/libfabric/*/lib64"
    shell = subprocess.run(["/bin/sh", "-c", LOADER_PREFIX_SCRIPT, pattern, "/bin/sh", "-c",
                            'echo "$LD_LIBRARY_PATH"'], env={"PATH": "/usr/bin:/bin",
                                                             "LD_LIBRARY_PATH": "/image/lib"},
                           capture_output=True, text=True, check=True).stdout.strip()
    python = newest_dir("/opt/cray/libfabric/*/lib64", cray)
    assert python == "/opt/cray/libfabric/1.22.0/lib64"  # the release, not its candidate
    assert shell == f"{cray}{python}:/image/lib"


def test_a_plain_directory_is_used_as_it_is(cray: Path) -> None:
    plain = subprocess.run(["/bin/sh", "-c", LOADER_PREFIX_SCRIPT, "/nonexistent/lib64",
                            "/bin/sh", "-c", 'echo "$LD_LIBRARY_PATH"'],
                           env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                           check=True).stdout.strip()
    assert plain == "/nonexistent/lib64"
    assert newest_dir("/opt/cray/libfabric/1.9.0/lib64", cray) == "/opt/cray/libfabric/1.9.0/lib64"


def test_lumi_names_no_release_and_an_edf_names_the_profiles() -> None:
    """An EDF has no shell: it gets the profile's libfabric.version; without one, an error."""
    lumi = load_site("lumi")
    assert lumi.libfabric is not None and lumi.libfabric.library_dir == "/opt/cray/libfabric/*/lib64"
    assert edf_env(lumi)["LD_LIBRARY_PATH"] == "/opt/cray/libfabric/1.22.0/lib64:${LD_LIBRARY_PATH}"
    unversioned = replace(lumi, libfabric=replace(lumi.libfabric, version=None))
    with pytest.raises(SquashError, match=r"names its release with \*, which an EDF cannot"):
        edf_env(unversioned)


@pytest.mark.parametrize(("value", "ok"), [
    ("/opt/cray/libfabric/*/lib64", True), ("/opt/cray/libfabric/1.22.0/lib64", True),
    ("/opt/*/libfabric/*/lib64", False), ("/opt/cray/lib*", False), ("opt/cray", False),
    ("/opt/cray/../etc", False)])
def test_one_whole_component_may_be_a_star(value: str, ok: bool) -> None:
    assert bool(re.match(grammar.RELEASE_DIR, value)) is ok
