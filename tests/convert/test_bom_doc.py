"""docs/build.md's bill-of-materials table is what `imagebuild build` prints: the same header,
the parts imagebuild.convert.sizes names in its order for an image without components (the
CPU demo's), the row it adds for removed device
code, and figures that add up; so the documentation cannot drift from the code silently."""

from __future__ import annotations

import re
from pathlib import Path

from imagebuild.convert.sizes import PartLayout, SizeTable

DOC = Path(__file__).resolve().parents[2] / "docs" / "build.md"
_ROW = re.compile(r"^(?P<part>\S.*?)\s+(?P<mib>\d+\.\d)\s+(?P<share>\d+\.\d)%\s+(?P<files>\d+)$")


def _documented() -> tuple[str, list[tuple[str, float, float, int]], str]:
    """The section's text, its table's rows (part, MiB, share, files), and its header."""
    section = DOC.read_text().split("## Bill of materials and sizes", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"\n\n((?:    .*\n)+)", section)
    assert block, "no indented size table in the section"
    lines = [line[4:] for line in block.group(1).splitlines()]
    rows = []
    for line in lines[1:]:
        match = _ROW.match(line)
        assert match, f"not a size row: {line!r}"
        rows.append((match["part"], float(match["mib"]), float(match["share"]),
                     int(match["files"])))
    return section, rows, lines[0]


def _parsed(line: str) -> tuple[str, float, float, int]:
    match = _ROW.match(line)
    assert match, line
    return match["part"], float(match["mib"]), float(match["share"]), int(match["files"])


def test_the_documented_table_is_the_one_the_build_prints() -> None:
    section, rows, header = _documented()
    *parts, total = rows
    assert [p for p, *_ in parts] == list(PartLayout.of([], []).parts) and total[0] == "total"
    table = SizeTable(tuple((part, round(mib * (1 << 20)), files)
                            for part, mib, _, files in parts))
    printed = table.lines()
    assert header == printed[0]
    for documented, line in zip(rows, printed[1:], strict=True):
        part, mib, share, files = _parsed(line)
        assert (documented[0], documented[3]) == (part, files)
        # MiB as documented; the share and the total from them, to the last digit's rounding
        assert abs(documented[1] - mib) <= 0.1 and abs(documented[2] - share) <= 0.1, line
    # the row a diet adds is named as the section names it
    removed = SizeTable(table.rows, (1 << 30, 10)).lines()[-1]
    name = removed.split("  ", 1)[0]
    assert f'"{name}"' in section
