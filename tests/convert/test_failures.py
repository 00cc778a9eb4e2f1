"""Interrupted or failed squashes leave nothing behind and say what failed, in one line."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from imagebuild.convert.sources import ImageConfig, TarballSource
from imagebuild.convert.squashfs import SquashTool, find_squash_tool, squash_image
from imagebuild.errors import SquashError
from imagebuild.process import CommandRunner
from tests.convert.conftest import CONFIG, Crafted


@dataclass
class InterruptingSource:
    """Streams a real tarball, then raises ``exc`` after ``after`` bytes (a Ctrl-C, an engine
    dropping the connection)."""

    path: Path
    after: int
    exc: BaseException
    description: str = "interrupting source"

    def config(self) -> ImageConfig:
        return CONFIG

    @contextmanager
    def rootfs_tar(self) -> Iterator[io.RawIOBase]:
        source = self

        class Stream(io.RawIOBase):
            def __init__(self) -> None:
                self.inner = open(source.path, "rb")  # noqa: SIM115
                self.sent = 0

            def readable(self) -> bool:
                return True

            def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
                if self.sent >= source.after:
                    raise source.exc
                size = self.inner.readinto(memoryview(buffer)[: source.after - self.sent])
                self.sent += size
                return size

            def close(self) -> None:
                self.inner.close()
                super().close()

        stream = Stream()
        try:
            yield stream
        finally:
            stream.close()


def big_tarball(path: Path, mib: int) -> Path:
    """A tar of incompressible data (so a small filesystem really fills up)."""
    import tarfile

    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for index in range(mib):
            info = tarfile.TarInfo(f"data/blob{index:04d}")
            info.size = 1 << 20
            tar.addfile(info, io.BytesIO(os.urandom(1 << 20)))
    return path


class RecordingRunner(CommandRunner):
    """The process seam: starts the real process and remembers it."""

    def __init__(self) -> None:
        super().__init__()
        self.procs: list[subprocess.Popen] = []

    @contextmanager
    def spawn(self, argv, **kwargs) -> Iterator[subprocess.Popen]:  # type: ignore[no-untyped-def]
        with super().spawn(argv, **kwargs) as proc:
            self.procs.append(proc)
            yield proc


def test_ctrl_c_mid_stream_kills_the_tool_and_leaves_nothing(tmp_path: Path) -> None:
    tarball = big_tarball(tmp_path / "big.tar", 8)
    out_dir = tmp_path / "out"
    runner = RecordingRunner()
    with pytest.raises(KeyboardInterrupt):
        squash_image(InterruptingSource(tarball, 3 << 20, KeyboardInterrupt()),
                     out_dir / "image.sqsh", runner=runner)
    assert list(out_dir.iterdir()) == []
    assert runner.procs and all(p.poll() is not None for p in runner.procs)


def test_broken_export_stream_is_one_clear_error(tmp_path: Path) -> None:
    tarball = big_tarball(tmp_path / "big.tar", 2)
    out_dir = tmp_path / "out"
    source = InterruptingSource(tarball, 1 << 20, ConnectionResetError(104, "reset"),
                                description="imagebuild/x:latest")
    with pytest.raises(SquashError) as info:
        squash_image(source, out_dir / "image.sqsh")
    assert str(info.value).startswith("export: reading the filesystem of imagebuild/x:latest")
    assert list(out_dir.iterdir()) == []


def test_truncated_tar_is_an_export_error(crafted: Crafted, tmp_path: Path) -> None:
    data = crafted.path.read_bytes()
    truncated = tmp_path / "truncated.tar"
    truncated.write_bytes(data[: len(data) // 2 + 100])
    with pytest.raises(SquashError, match=r"^export: reading the filesystem of .*truncated"):
        squash_image(TarballSource(truncated, CONFIG), tmp_path / "out" / "image.sqsh")
    assert list((tmp_path / "out").iterdir()) == []


def test_fake_tool_reporting_enospc(crafted: Crafted, tmp_path: Path) -> None:
    """At the subprocess seam: a tool that writes part of its output, then fails on ENOSPC
    after reading some input, like tar2sqfs on a full disk."""
    fake = tmp_path / "tar2sqfs"
    fake.write_text(f"""#!{sys.executable}
import sys
out = sys.argv[-1]
sys.stdin.buffer.read(4096)
open(out, "wb").write(b"half an image")
sys.stderr.write(out + ": write: No space left on device\\n")
sys.exit(1)
""")
    fake.chmod(0o755)
    out_dir = tmp_path / "out"
    with pytest.raises(SquashError) as info:
        squash_image(TarballSource(crafted.path, CONFIG), out_dir / "image.sqsh",
                     tool=SquashTool("tar2sqfs", str(fake)))
    message = str(info.value).splitlines()
    assert message[0].startswith(f"squash: tar2sqfs ran out of space writing {out_dir} (")
    assert message[0].endswith("MiB free); nothing was kept")
    assert "No space left on device" in message[1]
    assert list(out_dir.iterdir()) == []


def test_fake_tool_failing_otherwise(crafted: Crafted, tmp_path: Path) -> None:
    fake = tmp_path / "mksquashfs"
    fake.write_text("#!/bin/sh\necho 'FATAL ERROR: something odd' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(SquashError, match=r"^squash: mksquashfs failed writing image.sqsh "
                                          r"\(exit status 3\); nothing was kept\nFATAL ERROR"):
        squash_image(TarballSource(crafted.path, CONFIG), tmp_path / "out" / "image.sqsh",
                     tool=SquashTool("mksquashfs", str(fake)))


def test_missing_tools_are_named() -> None:
    with pytest.raises(SquashError, match="tar2sqfs or mksquashfs not found on PATH"):
        find_squash_tool(which=lambda name: None)


@contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({proc.stderr.strip()}); the fake-tool "
                    "test covers the same path at the subprocess seam")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False)


@pytest.mark.integration
@pytest.mark.parametrize("tool_name", ["tar2sqfs", "mksquashfs"])
def test_real_full_disk(tool_name: str, tmp_path: Path) -> None:
    """A 2 MiB tmpfs cannot hold 6 MiB of random data: the real tool hits ENOSPC."""
    tarball = big_tarball(tmp_path / "big.tar", 6)
    with small_tmpfs(tmp_path / "small", "2m") as small:
        out = small / "artifacts" / "image.sqsh"
        with pytest.raises(SquashError) as info:
            squash_image(TarballSource(tarball, CONFIG), out, tool=find_squash_tool(tool_name))
        first = str(info.value).splitlines()[0]
        if tool_name == "mksquashfs":  # says "No space left on device"
            assert first.startswith(f"squash: mksquashfs ran out of space writing {out.parent}")
        else:  # tar2sqfs 1.2 says only "I/O error"
            assert first.startswith(f"squash: tar2sqfs failed writing {out.parent} (I/O error)")
            assert "most likely a full disk; nothing was kept" in first
        assert list(out.parent.iterdir()) == []
