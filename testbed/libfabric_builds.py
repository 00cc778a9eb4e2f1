"""Real libfabric releases built from the source fixtures (libfabric-<release>.tar.bz2 in
../shared/fixtures/sources), installed under the test cache and reused: the host-side
libfabric the doctor's tests read and dlopen. Only libfabric's built-in providers (no
verbs, EFA or CXI headers here); the symbol versions are the release's own."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from testbed.base_images import _file_lock, cache_dir
from testbed.source_mirror import LIBFABRIC_RELEASES, fixtures_dir


def libfabric_build(release: str) -> Path:
    """The ``lib`` directory of libfabric ``release`` ("1.22.0", "2.1.0"), built once."""
    if release not in LIBFABRIC_RELEASES:
        raise ValueError(f"libfabric {release}: the fixtures have {', '.join(LIBFABRIC_RELEASES)}")
    prefix = cache_dir() / f"libfabric-{release}"
    library = prefix / "lib" / "libfabric.so.1"
    with _file_lock(f"libfabric-{release}"):
        if library.exists():
            return library.parent
        archive = fixtures_dir() / f"libfabric-{release}.tar.bz2"
        if not archive.exists():
            raise FileNotFoundError(f"{archive} is missing (the source fixtures: "
                                    "IMAGEBUILD_SOURCE_FIXTURES)")
        with tempfile.TemporaryDirectory(prefix="libfabric-", dir=cache_dir()) as tmp:
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")
            source = Path(tmp) / f"libfabric-{release}"
            staged = Path(tmp) / "install"
            jobs = str(os.cpu_count() or 2)
            for command in (["./configure", f"--prefix={prefix}", "--disable-static"],
                            ["make", "-j", jobs], ["make", "install", f"DESTDIR={staged}"]):
                result = subprocess.run(command, cwd=source, capture_output=True, text=True,
                                        check=False)
                if result.returncode != 0:
                    raise RuntimeError(f"libfabric {release}: {' '.join(command)} failed:\n"
                                       f"{result.stdout[-2000:]}{result.stderr[-2000:]}")
            # Installed under DESTDIR, then moved: an interrupted build leaves no prefix.
            shutil.move(str(staged / str(prefix).lstrip("/")), str(prefix))
    return library.parent
