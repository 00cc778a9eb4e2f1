"""The bytes of a SIF file that imagebuild reads and stamps.

Layout of sylabs/sif's header and rawDescriptor (pkg/sif/sif.go, written with
encoding/binary, little-endian, no padding): a 32-byte launch script, the magic at byte 32,
the image ID at 48, created/modified times (int64) at 64 and 72, the descriptor total and
offset (int64) at 88 and 96. Each 585-byte descriptor has its data type (int32) at 0, its
"used" flag at 4, its data offset and size (int64) at 17 and 25, its times at 41 and 49,
and for a partition its extra bytes at 201: file system type, then partition type (int32).
https://github.com/sylabs/sif/blob/main/pkg/sif/sif.go
"""

from __future__ import annotations

import struct
from typing import BinaryIO

from imagebuild.errors import SquashError

MAGIC = b"SIF_MAGIC\0"
LAUNCH_FIELD = 32  # the launch script's bytes come first; the magic follows them
HEADER_ID, HEADER_TIMES, HEADER_DESCRIPTORS = 48, 64, 88
DESCRIPTOR_SIZE = 585
DESCRIPTOR_USED, DESCRIPTOR_EXTENT, DESCRIPTOR_TIMES, DESCRIPTOR_EXTRA = 4, 17, 41, 201
DATA_PARTITION = 0x4004  # DataPartition
FS_SQUASH, PART_PRIMARY_SYSTEM = 1, 2  # FsSquash, PartPrimSys


def has_magic(header: bytes) -> bool:
    return header[LAUNCH_FIELD:LAUNCH_FIELD + len(MAGIC)] == MAGIC


def descriptor_table(stream: BinaryIO, name: str) -> tuple[int, int]:
    """(total, offset) of the descriptor table of the SIF open in ``stream``; an error
    naming ``name`` when it is not a SIF."""
    stream.seek(0)
    header = stream.read(HEADER_DESCRIPTORS + 16)
    if not has_magic(header):
        raise SquashError(f"{name}: not a SIF file (no SIF magic at byte {LAUNCH_FIELD})")
    total, offset = struct.unpack_from("<qq", header, HEADER_DESCRIPTORS)
    return total, offset
