"""Listing a repo.radeon.com-shaped index: over HTTP, from a directory, from HTML text."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from imagebuild.errors import WheelIndexError
from imagebuild.lock.index import IndexFile, WheelIndex, parse_listing
from tests.lock.index.conftest import FAST, TORCH, TORCH_CP312, TORCH_OTHER_BUILD, populate_rocm_702
from tests.support.indexserver import IndexServer, sha256_of

TOP_LEVEL_WHEELS = {
    TORCH_CP312,
    f"torch-{TORCH}-cp310-cp310-linux_x86_64.whl",
    f"torch-{TORCH_OTHER_BUILD}-cp312-cp312-linux_x86_64.whl",
    "torch-2.7.1+rocm7.0.2.lw.git2a215e4a-cp312-cp312-linux_x86_64.whl",
    "triton-3.4.0+rocm7.0.2.gitf9e5bf54-cp312-cp312-linux_x86_64.whl",
    "triton-3.4.0+rocm7.0.2.gitf9e5bf54-cp310-cp310-linux_x86_64.whl",
    "torchvision-0.23.0+rocm7.0.2.git824e8c87-cp312-cp312-linux_x86_64.whl",
    "torchvision-0.24.0+rocm7.0.2.gitb919bd0c-cp312-cp312-linux_x86_64.whl",
    "torchaudio-2.8.0+rocm7.0.2.git6e1c7fe9-cp312-cp312-linux_x86_64.whl",
    "apex-1.9.0a0+rocm7.0.2.git07c3ee53-cp312-cp312-linux_x86_64.whl",
}


def test_listing_decodes_url_encoded_hrefs_and_skips_non_wheels(rocm_index: IndexServer) -> None:
    page = requests.get(rocm_index.url, timeout=5).text
    assert "%2Brocm7.0.2" in page and "..&gt;</a>" in page  # encoded hrefs, truncated texts

    files = WheelIndex(rocm_index.url, **FAST).files()

    assert {f.filename for f in files} == TOP_LEVEL_WHEELS
    torch = next(f for f in files if f.filename == TORCH_CP312)
    assert torch.url == rocm_index.url + TORCH_CP312.replace("+", "%2B")
    assert (torch.name, str(torch.version), torch.python_tags) == ("torch", TORCH, "cp312")
    assert [str(t) for t in torch.tags] == ["cp312-cp312-linux_x86_64"]
    # The URL really names the file: fetching it gives its bytes.
    body = requests.get(torch.url, timeout=5).content
    assert body == (rocm_index.directory / TORCH_CP312).read_bytes()


def test_listing_keeps_every_build_of_one_version(rocm_index: IndexServer) -> None:
    files = WheelIndex(rocm_index.url, **FAST).files_for("torch")
    builds = {str(f.version) for f in files if f.version.public == "2.8.0"}
    assert builds == {TORCH, TORCH_OTHER_BUILD}


def test_listing_is_fetched_once_per_index_object(rocm_index: IndexServer) -> None:
    index = WheelIndex(rocm_index.url, **FAST)
    first = index.files()
    index.find("torch", TORCH)
    assert index.files() == first
    assert rocm_index.count("/") == 1


@pytest.mark.parametrize("hrefs", ["absolute", "rooted"])
def test_absolute_and_rooted_hrefs(tmp_path: Path, hrefs: str) -> None:
    populate_rocm_702(tmp_path / "index")
    with IndexServer(tmp_path / "index", hrefs=hrefs) as server:
        page = requests.get(server.url, timeout=5).text
        assert (f'href="{server.url}torch-' if hrefs == "absolute" else 'href="/torch-') in page
        files = WheelIndex(server.url, **FAST).files()
        assert {f.filename for f in files} == TOP_LEVEL_WHEELS
        assert all(f.url.startswith(server.url) for f in files)


def test_subdirectory_without_trailing_slash_follows_the_redirect(
        rocm_index: IndexServer) -> None:
    files = WheelIndex(rocm_index.url + "old", **FAST).files()
    assert [f.url for f in files] == [
        rocm_index.url + "old/torch-2.6.0%2Brocm6.4.1.git1ded221d-cp312-cp312-linux_x86_64.whl"]


@pytest.mark.parametrize("form", ["path", "file-url"])
def test_local_directory_lists_like_the_server(tmp_path: Path, form: str) -> None:
    directory = tmp_path / "wheels"
    populate_rocm_702(directory)
    location = str(directory) if form == "path" else directory.as_uri()

    index = WheelIndex(location)

    assert {f.filename for f in index.files()} == TOP_LEVEL_WHEELS
    found = index.find("torch", TORCH)
    assert found.url == (directory / TORCH_CP312).as_uri()


def test_local_directory_that_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(WheelIndexError, match=r"wheel index .*/nowhere: no such directory"):
        WheelIndex(tmp_path / "nowhere").files()


def test_unsupported_scheme() -> None:
    with pytest.raises(WheelIndexError, match="expected an http.s. or file URL"):
        WheelIndex("ftp://example.org/wheels/")


def test_parse_listing_html_variants() -> None:
    sha = "ab" * 32
    page = f"""<html><head><base href="https://mirror.example/rocm/"></head><body>
    <a href="sub/torch-2.8.0%2Brocm7.0.2.lw.git245bf6ed-cp312-cp312-linux_x86_64.whl#sha256={sha}">x</a>
    <a href="sub/torch-2.8.0%2Brocm7.0.2.lw.git245bf6ed-cp312-cp312-linux_x86_64.whl">dup</a>
    <a href="https://other.example/a/triton-3.4.0-cp312-cp312-linux_x86_64.whl">t</a>
    <a href="not-a-valid-wheel.whl">bad</a>
    <a href="torch-2.8.0.tar.gz">sdist</a><a href="../">up</a><a>no href</a>
    </body></html>"""
    listed = parse_listing(page, "https://ignored.example/")
    # The source archive is listed as one (TransformerEngine's torch extension is published
    # only so); wheel lookups never see it.
    assert [(f.filename, f.sdist) for f in listed if f.sdist] == [("torch-2.8.0.tar.gz", True)]
    files = [f for f in listed if not f.sdist]
    assert files == [
        IndexFile(
            filename="torch-2.8.0+rocm7.0.2.lw.git245bf6ed-cp312-cp312-linux_x86_64.whl",
            url="https://mirror.example/rocm/sub/"
                "torch-2.8.0%2Brocm7.0.2.lw.git245bf6ed-cp312-cp312-linux_x86_64.whl",
            name="torch", version=files[0].version, tags=files[0].tags, sha256=sha),
        IndexFile(filename="triton-3.4.0-cp312-cp312-linux_x86_64.whl",
                  url="https://other.example/a/triton-3.4.0-cp312-cp312-linux_x86_64.whl",
                  name="triton", version=files[1].version, tags=files[1].tags),
    ]
    assert files[0].sha256 == sha and files[1].sha256 is None


def test_listed_url_downloads_the_listed_bytes(rocm_index: IndexServer, cache) -> None:
    found = WheelIndex(rocm_index.url, **FAST).find("torch", TORCH)
    cached = cache.fetch(found.url)
    assert cached.filename == TORCH_CP312
    assert cached.sha256 == sha256_of(rocm_index.directory / TORCH_CP312)
