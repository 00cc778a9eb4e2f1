"""Compression settings reach the squashfs writers: algorithm, level and block size, read
back from the superblock of what each real tool wrote."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import pytest

from imagebuild.cli import build_parser
from imagebuild.convert.sources import TarballSource
from imagebuild.convert.squashfs import (
    DEFAULT_COMPRESSION,
    Compression,
    SquashTool,
    parse_compression,
    parse_size,
    squash_image,
)
from imagebuild.errors import SquashError
from tests.convert.conftest import CONFIG, Crafted
from tests.support.squashfs import read_squashfs

#: squashfs superblock compressor ids (squashfs-tools' squashfs_fs.h)
_COMPRESSOR_IDS = {"gzip": 1, "lzo": 3, "xz": 4, "lz4": 5, "zstd": 6}


def superblock(path: Path) -> tuple[int, int]:
    """(block size, compressor id) from a squashfs superblock (little endian: magic,
    inode count, mkfs time, block size, fragment count, compressor)."""
    magic, _, _, block_size, _, compressor = struct.unpack("<IIIIIH", path.read_bytes()[:22])
    assert magic == 0x73717368, path
    return block_size, compressor


@pytest.mark.integration
@pytest.mark.parametrize("compression", [Compression("zstd", 1, 256 << 10),
                                         Compression("lz4", None, 1 << 20),
                                         Compression("gzip", 6, 64 << 10)],
                         ids=str)
def test_each_tool_writes_what_was_asked(crafted: Crafted, squash_tool: SquashTool,
                                         compression: Compression, tmp_path: Path) -> None:
    out = tmp_path / "image.sqsh"
    squash_image(TarballSource(crafted.path, CONFIG), out, tool=squash_tool,
                 compression=compression)
    assert superblock(out) == (compression.block_size, _COMPRESSOR_IDS[compression.algorithm])
    data = crafted.expected["home/user/data.bin"][5]  # 300 KiB: whole blocks and a tail
    assert read_squashfs(out)["home/user/data.bin"].sha256 == hashlib.sha256(data).hexdigest()


@pytest.mark.integration
def test_default_is_zstd_in_128k_blocks(crafted: Crafted, tmp_path: Path) -> None:
    out = tmp_path / "image.sqsh"
    squash_image(TarballSource(crafted.path, CONFIG), out)
    assert superblock(out) == (128 << 10, _COMPRESSOR_IDS["zstd"])
    assert DEFAULT_COMPRESSION.block_size == 128 << 10


@pytest.mark.parametrize(("text", "size"), [("131072", 131072), ("128K", 131072),
                                            ("1M", 1 << 20), ("256KiB", 256 << 10),
                                            ("64k", 64 << 10)])
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(("arguments", "said"), [
    (("zstd", 23, None), "--level: zstd levels are 1..22, got 23"),
    (("lz4", 1, None), "--level: lz4 takes no compression level"),
    (("zstd", None, "3K"), "--block-size: squashfs takes a power of two from 4K to 1M, got 3072"),
    (("zstd", None, "2M"), "--block-size: squashfs takes a power of two from 4K to 1M"),
    (("zstd", None, "big"), "--block-size: expected bytes or a size like 128K or 1M, got 'big'"),
])
def test_bad_settings_name_the_option(arguments: tuple, said: str) -> None:
    with pytest.raises(SquashError, match=said):
        parse_compression(*arguments)


@pytest.mark.parametrize("command", ["squash", "build"])
def test_both_commands_take_the_settings(command: str) -> None:
    args = build_parser([command]).parse_args(
        [command, "x", "--compression", "zstd", "--level", "5", "--block-size", "256K"])
    assert parse_compression(args.compression, args.level, args.block_size) == \
        Compression("zstd", 5, 256 << 10)
    assert str(Compression("zstd", 5, 256 << 10)) == "zstd:5, 256K blocks"
    assert str(DEFAULT_COMPRESSION) == "zstd:2"
