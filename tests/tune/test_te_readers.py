"""`tune te-file` writes the layout the image's TransformerEngine reads: for each TE version
the project meets, the file is read back the way that version's upstream reader reads it
(fixtures/te-algo-readers: its legend, then each row's fields in load_()'s order and kinds),
and the layout follows the version from the image manifest, the recipe, or the flags."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from imagebuild.components.transformer_engine.component import section as te_section
from imagebuild.errors import TuneError
from imagebuild.inimage.tuning.bundle_format import BundleProblem, read_bundle, write_bundle
from imagebuild.recipe.load import load_recipe
from imagebuild.tune.te_layout import layout_for_version

from .test_bundle_apply import make_bundle
from .test_cli import run

READERS = json.loads((Path(__file__).parent / "fixtures" / "te-algo-readers" /
                      "readers.json").read_text())
REPO = Path(__file__).resolve().parents[2]


def project_te_versions() -> set[str]:
    """The TransformerEngine versions the shipped recipes pin (the index's releases; a
    source build's version is its checkout's, recorded in the image manifest, which
    `tune te-file --manifest` reads)."""
    versions = set()
    for path in sorted((REPO / "recipes").glob("rocm-*.yaml")):
        engine = te_section(load_recipe(path.stem, REPO))
        if engine and engine.source is None:
            versions.add(engine.version)
    return versions


def read_as_upstream(text: str, reader: dict) -> list[dict[str, str]]:
    """The rows a reader accepts, each field taken as load_() takes it: an int is digits
    (``is >> value``) and the one character after it; a text runs to the next comma."""
    lines = text.splitlines()
    assert lines[0] == ",".join(reader["legend"]), "Incorrect algo storage legend"
    rows = []
    for line in lines[1:]:
        rest, fields = line.strip(), {}
        for name, kind in reader["row"]:
            if kind == "int":
                match = re.match(r"-?\d+", rest)
                assert match, f"{name}: no number at {rest!r} in {line!r}"
                fields[name], rest = match.group(), rest[match.end() + 1:]
            else:
                fields[name], _, rest = rest.partition(",")
        assert rest == "", f"left over after the last field: {rest!r} in {line!r}"
        names = READERS["names"]
        for column in ("type_a", "type_b", "type_d", "scale"):
            assert fields[column] in names["types"], (column, fields[column])
        assert fields["bias_type"] == "-" or fields["bias_type"] in names["types"]
        assert {fields["trans_a"], fields["trans_b"]} <= set(names["trans"])
        assert fields["epi"] in names["epilogues"] and fields["comp"] in names["comp"]
        rows.append(fields)
    return rows


@pytest.fixture()
def te_bundle(tmp_path):
    """A bundle tuned in the TransformerEngine recipe's image (rocm-7.1.1): one
    hipblaslt-bench winner and one TunableOp solution."""
    directory = tmp_path / "bundle"
    directory.mkdir()
    bundle = make_bundle(directory)
    (directory / "tunableop_results0.csv").write_text(
        "Validator,PT_VERSION,2.9.1\n"
        "GemmTunableOp_BFloat16_NT,nt_4096_14336_8192_ld_4096_14336_4096,Gemm_Hipblaslt_51377,3.9\n")
    write_bundle(directory, replace(bundle, recipe="rocm-7.1.1", problems=(
        *bundle.problems, BundleProblem(4096, 14336, 8192, 1, "N", "T", "bf16_r"))))
    return directory


def test_the_projects_versions_are_in_the_reader_table():
    assert project_te_versions() <= set(READERS["versions"]), \
        "a recipe pins a TransformerEngine version with no upstream reader recorded"


@pytest.mark.parametrize("version", sorted(READERS["versions"]))
def test_each_version_reads_what_te_file_writes(version, te_bundle, capsys):
    reader = READERS["readers"][READERS["versions"][version]]
    assert run(["te-file", str(te_bundle), "--te-version", version]) == 0
    assert f"TransformerEngine {version}, as --te-version says" in capsys.readouterr().out
    rows = read_as_upstream((te_bundle / "te_hipblaslt_algos.csv").read_text(), reader)
    got = {(r["m"], r["n"], r["k"], r["trans_a"], r["trans_b"]): r for r in rows}
    bench = got[("4096", "8192", "14336", "T", "N")]
    assert (bench["algo_id"], bench["lda"], bench["ldb"], bench["ldd"]) == \
        ("73211", "14336", "14336", "4096")
    assert got[("4096", "14336", "8192", "N", "T")]["algo_id"] == "51377"
    assert all(r["dev_cap"] == "904" and r["type_a"] == "bfloat16" for r in rows)
    assert all(r.get("fp8_scale", "0") == "0" for r in rows)


def test_a_file_in_the_other_layout_is_refused_by_each_reader(te_bundle):
    for version, name in READERS["versions"].items():
        other = "2024" if layout_for_version(version) == "2025" else "2025"
        run(["te-file", str(te_bundle), "--te-layout", other])
        with pytest.raises(AssertionError, match="Incorrect algo storage legend"):
            read_as_upstream((te_bundle / "te_hipblaslt_algos.csv").read_text(),
                             READERS["readers"][name])


def test_the_recipes_te_picks_the_layout(te_bundle, capsys, monkeypatch):
    """No flag, no manifest here: the bundle's recipe (rocm-7.1.1, TE 2.2.0) decides."""
    monkeypatch.delenv("IMAGEBUILD_MANIFEST", raising=False)
    assert run(["te-file", str(te_bundle)]) == 0
    assert "(TE layout 2024: TransformerEngine 2.2.0 of recipe rocm-7.1.1" \
        in capsys.readouterr().out
    read_as_upstream((te_bundle / "te_hipblaslt_algos.csv").read_text(),
                     READERS["readers"]["storage-2024"])


def test_the_image_manifests_te_picks_the_layout(te_bundle, tmp_path, capsys, monkeypatch):
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"recipe": "x", "transformer_engine": {
        "enabled": True, "version": "2.4.0"}}))
    monkeypatch.setenv("IMAGEBUILD_MANIFEST", str(manifest))  # as inside the image
    assert run(["te-file", str(te_bundle)]) == 0
    assert f"TransformerEngine 2.4.0 of the image manifest {manifest}" in capsys.readouterr().out
    read_as_upstream((te_bundle / "te_hipblaslt_algos.csv").read_text(),
                     READERS["readers"]["scaling-mode-2025"])


def test_no_te_to_read_it_is_refused(te_bundle, tmp_path, monkeypatch):
    monkeypatch.delenv("IMAGEBUILD_MANIFEST", raising=False)
    bundle = read_bundle(te_bundle)
    write_bundle(te_bundle, replace(bundle, recipe="rocm-7.0.2"))
    with pytest.raises(TuneError, match="rocm-7.0.2: no transformer_engine section"):
        run(["te-file", str(te_bundle)])
    manifest = tmp_path / "no-te.json"
    manifest.write_text(json.dumps({"transformer_engine": {"enabled": False}}))
    with pytest.raises(TuneError, match="no transformer_engine version"):
        run(["te-file", str(te_bundle), "--manifest", str(manifest)])
    assert not (te_bundle / "te_hipblaslt_algos.csv").exists()


@pytest.mark.parametrize("version, layout", [
    ("1.12.0", "2024"), ("2.2.0", "2024"), ("2.2.1+rocm7.1", "2024"), ("2.4.0", "2025"),
    ("2.8.0", "2025"), ("3.0", "2025")])
def test_the_version_table(version, layout):
    assert layout_for_version(version) == layout


def test_versions_before_the_storage_and_nonsense_are_refused():
    for old in ("1.5.0", "1.11.0"):
        with pytest.raises(TuneError, match="predates the algorithm file"):
            layout_for_version(old)
    with pytest.raises(TuneError, match="not a version"):
        layout_for_version("latest")


def test_the_docs_sample_is_what_te_file_prints(te_bundle, monkeypatch):
    from tests.support.doc_samples import assert_reproduced, run_sample, sample

    monkeypatch.delenv("IMAGEBUILD_MANIFEST", raising=False)
    found = sample("docs/tune.md", "imagebuild tune te-file")
    env = {"IMAGEBUILD_PROJECT": str(REPO)}
    assert_reproduced(found, run_sample(found, te_bundle.parent, env=env,
                                        cwd=te_bundle.parent))
