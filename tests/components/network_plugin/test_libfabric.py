"""The libfabric policy: which release the network plugin may be built against, per site.

The ABI table is checked against the libfabric fixtures' own libfabric.map.in (the
archives are upstream's release layout); tests/components/network_plugin/test_plugin_stage.py proves the
consequences with real builds and real loads.
"""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import pytest
import yaml

from imagebuild.components.network_plugin import component as network_plugin
from imagebuild.components.network_plugin.libfabric import abi_name, abi_of
from imagebuild.errors import RenderError, SiteProfileError
from imagebuild.recipe.load import load_recipe
from imagebuild.recipe.site import parse_site
from imagebuild.render.plan import plan_for
from testbed.source_mirror import fixtures_dir
from tests.components.conftest import REPO


@pytest.mark.parametrize("release", ["1.22.0", "2.1.0"])
def test_abi_table_matches_the_release_archive(release: str) -> None:
    archive = fixtures_dir() / f"libfabric-{release}.tar.bz2"
    with tarfile.open(archive) as tar:
        member = tar.extractfile(f"libfabric-{release}/libfabric.map.in")
        assert member is not None
        tags = set(re.findall(r"FABRIC_\d+\.\d+", member.read().decode()))
    newest = max(tags, key=lambda t: tuple(int(x) for x in t[7:].split(".")))
    assert abi_name(abi_of(release)) == newest


@pytest.mark.parametrize(("release", "tag"), [
    ("1.15.2", "FABRIC_1.6"), ("1.19.1", "FABRIC_1.6"), ("1.20.1", "FABRIC_1.7"),
    ("2.0.0", "FABRIC_1.8"), ("2.4.0", "FABRIC_1.8"), ("2.5.1", "FABRIC_1.9")])
def test_abi_of_known_releases(release: str, tag: str) -> None:
    assert abi_name(abi_of(release)) == tag


def project_with(tmp_path: Path, *, libfabric: str, sites: list[str],
                 site_profiles: dict[str, dict] | None = None) -> Path:
    root = tmp_path / "project"
    (root / "recipes").mkdir(parents=True)
    for name in ("_common.yaml", "rocm-7.0.2.yaml"):
        (root / "recipes" / name).write_text((REPO / "recipes" / name).read_text())
    common = yaml.safe_load((root / "recipes" / "_common.yaml").read_text())
    common["network_plugin"]["libfabric"]["version"] = libfabric
    common["sites"] = sites
    (root / "recipes" / "_common.yaml").write_text(yaml.safe_dump(common))
    for name, profile in (site_profiles or {}).items():
        (root / "sites").mkdir(exist_ok=True)
        (root / "sites" / f"{name}.yaml").write_text(yaml.safe_dump(profile))
    return root


def site(name: str, **libfabric: object) -> dict:
    return {"name": name, "gpu_targets": ["gfx942"], "libfabric": libfabric}


def test_shipped_recipes_build_against_what_their_sites_bind() -> None:
    recipe = load_recipe("rocm-7.0.2", REPO)
    planned = network_plugin.planned(plan_for(recipe, None).parts)
    assert planned is not None
    target = planned.libfabric_target
    assert target.oldest_release == "1.22.0" and target.max_abi == "FABRIC_1.7"
    plugin = network_plugin.section(recipe)
    assert plugin is not None
    assert abi_of(plugin.libfabric.version) <= abi_of(target.oldest_release)


def test_libfabric_newer_than_a_bound_site_is_refused_naming_both(tmp_path: Path) -> None:
    root = project_with(tmp_path, libfabric="2.1.0", sites=["old", "new"], site_profiles={
        "old": site("old", provided_by="site", version="1.15.2"),
        "new": site("new", provided_by="site", version="2.1.0")})
    with pytest.raises(RenderError) as caught:
        plan_for(load_recipe("rocm-7.0.2", root), None)
    message = str(caught.value)
    assert "network_plugin.libfabric.version" in message
    assert "needs FABRIC_1.8" in message and "libfabric 1.15.2" in message
    assert "site old" in message and "up to FABRIC_1.6" in message


def test_the_oldest_bound_release_bounds_the_plugin(tmp_path: Path) -> None:
    root = project_with(tmp_path, libfabric="1.14.0", sites=["old", "new"], site_profiles={
        "old": site("old", provided_by="site", version="1.15.2"),
        "new": site("new", provided_by="site", version="2.1.0")})
    plugin = network_plugin.planned(plan_for(load_recipe("rocm-7.0.2", root), None).parts)
    assert plugin is not None
    assert plugin.libfabric_target.oldest_release == "1.15.2"
    assert plugin.libfabric_target.max_abi == "FABRIC_1.6"


def test_no_bound_site_means_the_images_own_libfabric(tmp_path: Path) -> None:
    root = project_with(tmp_path, libfabric="2.1.0", sites=[])
    plugin = network_plugin.planned(plan_for(load_recipe("rocm-7.0.2", root), None).parts)
    assert plugin is not None
    assert plugin.libfabric_target.max_abi == "FABRIC_1.8"
    assert plugin.libfabric_target.oldest_from == "the image's own libfabric"


def test_a_site_expecting_the_image_to_carry_cxi_is_refused(tmp_path: Path) -> None:
    """Without the cxi_stack section the image's libfabric has only its built-in providers."""
    root = project_with(tmp_path, libfabric="1.22.0", sites=["carry"], site_profiles={
        "carry": {**site("carry", provided_by="image"), "network": {"provider": "cxi"}}})
    with pytest.raises(RenderError, match="with provider cxi, which the image's libfabric "
                                          "1.22.0 does not have") as caught:
        plan_for(load_recipe("rocm-7.0.2", root), None)
    assert "enable the cxi_stack section" in str(caught.value.hint)


def test_a_site_on_the_image_s_libfabric_without_a_provider_takes_the_image_s(
        tmp_path: Path) -> None:
    root = project_with(tmp_path, libfabric="1.22.0", sites=["carry"], site_profiles={
        "carry": site("carry", provided_by="image")})
    plugin = network_plugin.planned(plan_for(load_recipe("rocm-7.0.2", root), None).parts)
    assert plugin is not None
    assert plugin.libfabric_target.oldest_from == "the image's own libfabric"


def test_an_unknown_site_is_named(tmp_path: Path) -> None:
    root = project_with(tmp_path, libfabric="1.22.0", sites=["nowhere"])
    with pytest.raises(RenderError, match="sites: nowhere"):
        plan_for(load_recipe("rocm-7.0.2", root), None)


@pytest.mark.parametrize(("libfabric", "problem"), [
    ({"provided_by": "somewhere"}, "libfabric.provided_by"),
    ({"provided_by": "site"}, "libfabric.version"),
    ({"provided_by": "site", "version": 1.22}, "libfabric.version"),
    ({"provided_by": "image", "version": "1.22.0"}, "libfabric.version"),
    ({"provided_by": "site", "version": "1.22.0", "library_dir": "lib64"},
     "libfabric.library_dir"),
    ({"provided_by": "site", "version": "1.22.0", "extra": 1}, "libfabric.extra"),
])
def test_bad_site_libfabric_policy_names_the_key(libfabric: dict, problem: str) -> None:
    data = yaml.safe_dump({"name": "x", "libfabric": libfabric}).encode()
    with pytest.raises(SiteProfileError, match=re.escape(problem)):
        parse_site(data, "sites/x.yaml")
