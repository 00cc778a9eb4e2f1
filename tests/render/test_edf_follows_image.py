"""Every shipped recipe at every shipped site: the EDF and the batch job's environment name
only a network the image can load (RCCL fails at its first communicator when NCCL_NET
names an absent network), and the committed envs/ say so."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

import pytest

from imagebuild.errors import RenderError
from imagebuild.recipe.image_network import ImageNetwork
from imagebuild.recipe.load import load_recipe, recipe_names
from imagebuild.recipe.site import load_site, site_names
from imagebuild.render.edf import generated_edf
from imagebuild.render.plan import BuildPlan, plan_for
from imagebuild.validate.site_defaults import resolve

ROOT = Path(__file__).resolve().parents[2]
RECIPES = recipe_names(ROOT)
SITES = site_names(ROOT)
LIBFABRIC = ("FI_", "CXI_", "OFI_NCCL_")


@cache
def plan(name: str) -> BuildPlan:
    return plan_for(load_recipe(name, ROOT), None, ROOT)


def loadable(plan: BuildPlan, site_plugin: str) -> set[str]:
    """What the image can load, read from the plan's parts and packages themselves (not
    from ImageNetwork): a part that sets NCCL_NET_PLUGIN installs a plugin, and RCCL's IB
    transport needs libibverbs with its providers."""
    names = {"Socket"}
    plugin = any(v.name == "NCCL_NET_PLUGIN" for p in plan.parts.values() for v in p.env)
    if plugin or site_plugin == "site":
        names.add("AWS Libfabric")
    packages = {p.split("=")[0] for p in plan.runtime_packages}
    if {"libibverbs1", "ibverbs-providers"} <= packages:
        names.add("IB")
    return names


def assert_fits(env: dict[str, str], plan: BuildPlan, site_plugin: str, where: str) -> None:
    wanted = env.get("NCCL_NET")
    if wanted is not None:
        assert wanted in loadable(plan, site_plugin), \
            f"{where}: NCCL_NET={wanted!r} but the image can load {sorted(loadable(plan, site_plugin))}"
    has_plugin = "AWS Libfabric" in loadable(plan, "image")
    if not has_plugin and site_plugin == "image":
        stray = sorted(k for k in env if k.startswith(LIBFABRIC))
        assert not stray, f"{where}: libfabric variables for an image without a plugin: {stray}"


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("site_name", SITES)
def test_every_recipe_at_every_site_names_only_networks_the_image_loads(
        recipe: str, site_name: str) -> None:
    site = load_site(site_name, ROOT)
    built = plan(recipe)
    try:
        text = generated_edf(built.recipe, ROOT, site_name, built.image_network).text
    except RenderError as exc:
        # A refusal is allowed only for a site the recipe is not made for, and it says why.
        assert site_name not in built.recipe.sites, f"{recipe} at its own site {site_name}: {exc}"
        assert site_name in str(exc) or str(site.source) in str(exc)
        return
    edf = tomllib.loads(text)
    assert_fits(edf.get("env", {}), built, site.network.plugin, f"{recipe} EDF at {site_name}")
    job = resolve({}, site, built.image_network)
    assert_fits(dict(job.env), built, site.network.plugin, f"{recipe} job at {site_name}")


@pytest.mark.parametrize("recipe", RECIPES)
def test_committed_edfs_fit_their_images(recipe: str) -> None:
    """envs/<recipe>.toml (rendered for the default site) as committed."""
    edf = tomllib.loads((ROOT / "envs" / f"{recipe}.toml").read_text())
    site = load_site("cscs-beverin", ROOT)
    assert_fits(edf.get("env", {}), plan(recipe), site.network.plugin, f"envs/{recipe}.toml")


def test_an_image_without_plugin_loses_the_plugin_settings_and_says_so() -> None:
    built = plan("rocm-7.14.1")
    assert built.image_network.plugin is None
    text = generated_edf(built.recipe, ROOT, "cscs-beverin", built.image_network).text
    env = tomllib.loads(text)["env"]
    assert "NCCL_NET" not in env and "FI_PROVIDER" not in env
    assert env["NCCL_SOCKET_IFNAME"] == "hsn0,hsn1,hsn2,hsn3"  # the rest stays
    assert "no network plugin" in text and "left out" in text and "NCCL_NET" in text.split(
        "left out")[1].splitlines()[0]


def test_an_image_with_plugin_keeps_them() -> None:
    built = plan("rocm-7.2.4")
    assert built.image_network.plugin is not None
    env = tomllib.loads(generated_edf(built.recipe, ROOT, "cscs-beverin",
                                      built.image_network).text)["env"]
    assert env["NCCL_NET"] == "AWS Libfabric" and env["FI_PROVIDER"] == "cxi"


def test_ib_without_verbs_providers_is_refused() -> None:
    site = load_site("mi300x-ib", ROOT)
    with pytest.raises(RenderError, match="ibverbs-providers"):
        resolve({}, site, ImageNetwork(plugin=None, verbs=False))


def test_a_profile_naming_a_network_the_image_lacks_is_refused(tmp_path: Path) -> None:
    sites = tmp_path / "sites"
    sites.mkdir()
    text = (ROOT / "imagebuild/data/sites/mi300x-ib.yaml").read_text()
    (sites / "ib-plugin.yaml").write_text(
        text.replace("name: mi300x-ib", "name: ib-plugin").replace(
            "  env:\n", '  env:\n    NCCL_NET: "AWS Libfabric"\n', 1).replace(
            "plugin: none", "plugin: none"))
    site = load_site("ib-plugin", tmp_path)
    with pytest.raises(RenderError, match="AWS Libfabric"):
        resolve({}, site, ImageNetwork(plugin=None, verbs=True))
