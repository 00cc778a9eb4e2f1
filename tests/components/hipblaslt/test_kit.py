"""hipblaslt-tuning-kit.sh, run for real (sh, real files) on build trees of both layouts.

Each fabricated tree carries a find_exact.py that reads its build directory the way that
release's utilities/find_exact.py does (the path lines are the upstream ones):
- ROCm/hipBLASLt up to rocm-6.4.x: BuildDir + "/clients/staging/hipblaslt-bench" and
  BuildDir + "/library/MatchTable.yaml" (docs-6.4.3 "Using the hipBLASLt Tuning Utility":
  "Ensure the MatchTable.yaml file exists in build/release/library");
- ROCm/rocm-libraries projects/hipblaslt: BuildDir + "/clients/hipblaslt-bench", the
  MatchTablePath "/device-library/MatchTable.yaml", and `from fix_yaml_types import ...`.
The kit's output is then used exactly as users do: `python find_exact.py CONFIG BUILD OUT`
runs from the kit alone, with the source and build trees deleted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from imagebuild.components.hipblaslt import component as hipblaslt

TUNING_KIT = hipblaslt.FOLDER / "tuning-kit.sh"
LOGIC = "library/src/amd_detail/rocblaslt/src/Tensile/Logic/asm_full/gfx942"

#: What find_exact.py does with the build tree, reduced to its reads: run the bench, read the
#: match table, open every logic YAML it names and write a copy (CreateLogic).
FINDER = """\
import os
import subprocess
import sys
import yaml
{imports}
globalParameters = {{"BuildDir": sys.argv[2]}}
{paths}
out = sys.argv[3]
os.makedirs(out, exist_ok=True)
bench = subprocess.run([execBenchPath], check=True, capture_output=True, text=True).stdout
with open(tableFile) as handle:
    table = yaml.safe_load(handle)
for index, (logic, local) in sorted(table.items()):
    with open(logic) as handle:
        data = yaml.safe_load(handle)
    with open(os.path.join(out, os.path.basename(logic)), "w") as handle:
        handle.write({fix}(yaml.safe_dump(data)))
print(bench.strip(), len(table))
"""
LAYOUTS = {
    "rocm-6.4": {
        "imports": "",
        "paths": ('execBenchPath = globalParameters["BuildDir"] + '
                  '"/clients/staging/hipblaslt-bench"\n'
                  'tableFile = globalParameters["BuildDir"] + "/library/MatchTable.yaml"'),
        "fix": "str",
        "bench": "clients/staging/hipblaslt-bench",
        "table": "library/MatchTable.yaml",
    },
    "monorepo": {
        "imports": "from fix_yaml_types import fix_content",
        "paths": ('globalParameters["MatchTablePath"] = "/device-library/MatchTable.yaml"\n'
                  'execBenchPath = globalParameters["BuildDir"] + "/clients/hipblaslt-bench"\n'
                  'tableFile = globalParameters["BuildDir"] + '
                  'globalParameters["MatchTablePath"]'),
        "fix": "fix_content",
        "bench": "clients/hipblaslt-bench",
        "table": "device-library/MatchTable.yaml",
    },
}


def build_tree(root: Path, layout: str) -> Path:
    """What install.sh -c leaves: sources, utilities, build/release with bench and table."""
    spec = LAYOUTS[layout]
    src = root / "src" / "hipblaslt"
    utilities = src / "utilities"
    utilities.mkdir(parents=True)
    (utilities / "find_exact.py").write_text(FINDER.format(**spec))
    (utilities / "fix_yaml_types.py").write_text(
        "def fix_content(text):\n    return '# fixed\\n' + text\n")
    (utilities / "unrelated.py").write_text("# not imported by find_exact.py\n")
    release = src / "build" / "release"
    bench = release / spec["bench"]
    bench.parent.mkdir(parents=True)
    bench.write_text("#!/bin/sh\necho build-tree-bench\n")
    bench.chmod(0o755)
    (src / LOGIC).mkdir(parents=True)
    for name in ("a.yaml", "b.yaml", "unused.yaml"):
        (src / LOGIC / name).write_text(yaml.safe_dump([{"name": name}]))
    table = {i: [str(src / LOGIC / name), i] for i, name in enumerate(["a.yaml", "b.yaml"])}
    table[7] = [str(src / LOGIC / "a.yaml"), 5]
    (release / spec["table"]).parent.mkdir(parents=True, exist_ok=True)
    (release / spec["table"]).write_text(yaml.safe_dump(table))
    return src


def install_bench(prefix: Path) -> None:
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "hipblaslt-bench").write_text("#!/bin/sh\necho installed-bench\n")
    (prefix / "bin" / "hipblaslt-bench").chmod(0o755)


def kit(src: Path, prefix: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(TUNING_KIT), str(src), str(prefix)], check=False,
                          capture_output=True, text=True, timeout=60)


def find_exact(prefix: Path, out: Path) -> subprocess.CompletedProcess:
    root = prefix / "tuning"
    return subprocess.run([sys.executable, str(root / "utilities" / "find_exact.py"),
                           "config.yaml", str(root / "build" / "release"), str(out)],
                          check=False, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_kit_lays_out_what_that_releases_find_exact_reads(tmp_path: Path, layout: str):
    spec = LAYOUTS[layout]
    src = build_tree(tmp_path, layout)
    prefix = tmp_path / "opt" / "hipblaslt"
    install_bench(prefix)
    result = kit(src, prefix)
    assert result.returncode == 0, result.stderr
    root = prefix / "tuning"
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                   if p.is_file() or p.is_symlink())
    classic = LAYOUTS["rocm-6.4"]
    assert files == sorted({
        "utilities/find_exact.py",
        *(["utilities/fix_yaml_types.py"] if layout == "monorepo" else []),
        f"build/release/{spec['bench']}",
        f"build/release/{spec['table']}",
        # the older layout, in every kit: links where this release reads other paths
        f"build/release/{classic['bench']}",
        f"build/release/{classic['table']}",
        f"src/{LOGIC}/a.yaml",
        f"src/{LOGIC}/b.yaml",
    })
    bench = root / "build/release" / spec["bench"]
    assert bench.is_symlink() and os.readlink(bench) == str(prefix / "bin" / "hipblaslt-bench")
    assert f"(build/release/{spec['table']})" in result.stdout
    # The source and build trees do not reach the image: the kit alone must do.
    shutil.rmtree(src)
    out = tmp_path / "out"
    run = find_exact(prefix, out)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["installed-bench", "3"]
    assert sorted(p.name for p in out.iterdir()) == ["a.yaml", "b.yaml"]
    if layout == "monorepo":
        assert (out / "a.yaml").read_text().startswith("# fixed\n")


def test_the_older_find_exact_runs_against_a_monorepo_kit(tmp_path: Path):
    """A 7.x image's kit (the monorepo's find_exact.py reads clients/hipblaslt-bench and
    device-library/MatchTable.yaml) also has the layout the users' find_exact.py and
    `tune gemm --find-exact` read: <build dir>/clients/staging/hipblaslt-bench and
    <build dir>/library/MatchTable.yaml, links to the same files (no second copy)."""
    src = build_tree(tmp_path, "monorepo")
    prefix = tmp_path / "opt" / "hipblaslt"
    install_bench(prefix)
    result = kit(src, prefix)
    assert result.returncode == 0, result.stderr
    release = prefix / "tuning" / "build" / "release"
    bench = release / "clients" / "staging" / "hipblaslt-bench"
    table = release / "library" / "MatchTable.yaml"
    assert os.readlink(bench) == "../../clients/hipblaslt-bench"
    assert os.readlink(table) == "../device-library/MatchTable.yaml"
    assert bench.resolve() == (prefix / "bin" / "hipblaslt-bench").resolve()
    assert "build/release/library/MatchTable.yaml links build/release/device-library/" \
        "MatchTable.yaml" in result.stdout
    # the older release's script, in place of the kit's own; the trees deleted
    older = build_tree(tmp_path / "older", "rocm-6.4") / "utilities" / "find_exact.py"
    shutil.copy(older, prefix / "tuning" / "utilities" / "find_exact.py")
    shutil.rmtree(src)
    shutil.rmtree(tmp_path / "older")
    run = find_exact(prefix, tmp_path / "out")
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["installed-bench", "3"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.yaml", "b.yaml"]


def test_kit_copies_the_build_trees_bench_when_none_was_installed(tmp_path: Path):
    src = build_tree(tmp_path, "rocm-6.4")
    prefix = tmp_path / "opt" / "hipblaslt"
    assert kit(src, prefix).returncode == 0
    bench = prefix / "tuning" / "build/release/clients/staging/hipblaslt-bench"
    assert not bench.is_symlink() and os.access(bench, os.X_OK)
    shutil.rmtree(src)
    run = find_exact(prefix, tmp_path / "out")
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[0] == "build-tree-bench"


def test_kit_keeps_relative_table_names_relative(tmp_path: Path):
    src = build_tree(tmp_path, "monorepo")
    release = src / "build" / "release"
    (release / "device-library" / "MatchTable.yaml").write_text(
        yaml.safe_dump({0: [f"../../{LOGIC}/a.yaml", 0]}))
    prefix = tmp_path / "opt" / "hipblaslt"
    assert kit(src, prefix).returncode == 0
    kept = prefix / "tuning" / "build" / "release" / ".." / ".." / LOGIC / "a.yaml"
    assert kept.resolve().is_file()


@pytest.mark.parametrize(("breakage", "message"), [
    ("no-paths", "names no hipblaslt-bench path"),
    ("two-tables", "names several MatchTable.yaml paths"),
    ("missing-logic", "MatchTable.yaml names"),
    ("no-table", "no MatchTable.yaml at"),
    ("no-bench", "no hipblaslt-bench at"),
    ("no-utility", "no utilities/find_exact.py"),
    ("no-build", "no build tree at"),
])
def test_kit_fails_loudly_on_an_incomplete_tree(tmp_path: Path, breakage: str, message: str):
    src = build_tree(tmp_path, "rocm-6.4")
    release = src / "build" / "release"
    finder = src / "utilities" / "find_exact.py"
    {"no-paths": lambda: finder.write_text("# find_exact\n"),
     "two-tables": lambda: finder.write_text(
         finder.read_text() + 'other = "/device-library/MatchTable.yaml"\n'),
     "missing-logic": lambda: (src / LOGIC / "b.yaml").unlink(),
     "no-table": lambda: (release / "library" / "MatchTable.yaml").unlink(),
     "no-bench": lambda: (release / "clients" / "staging" / "hipblaslt-bench").unlink(),
     "no-utility": lambda: finder.unlink(),
     "no-build": lambda: shutil.rmtree(release)}[breakage]()
    result = kit(src, tmp_path / "opt" / "hipblaslt")
    assert result.returncode == 1
    assert message in result.stderr
