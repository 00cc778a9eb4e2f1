"""The shipped site profiles as the sites run now: LUMI's settings by ROCm release and its
driver's limit, the InfiniBand image's verbs providers, the Frontier profile, and the
aws-ofi-nccl floor wherever NCCL_PROTO or a tuner is set."""

from __future__ import annotations

import dataclasses
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from imagebuild.errors import RenderError
from imagebuild.recipe.image_network import ImageNetwork, NetPlugin, below_floor, release_tuple
from imagebuild.recipe.load import load_recipe, recipe_names
from imagebuild.recipe.model import GitSource, Recipe
from imagebuild.recipe.site import load_site
from imagebuild.render.edf import generated_edf
from imagebuild.render.inputs import plan_inputs
from imagebuild.render.plan import BuildPlan, make_plan, plan_for
from imagebuild.validate.invocation import Invocation
from imagebuild.validate.launch_sbatch import SbatchSpec, sbatch_script
from imagebuild.validate.site_defaults import resolve
from imagebuild.validate.target import Target

ROOT = Path(__file__).resolve().parents[2]


@cache
def plan(name: str) -> BuildPlan:
    return plan_for(load_recipe(name, ROOT), None, ROOT)


def edf_env(recipe: str, site: str) -> dict[str, str]:
    built = plan(recipe)
    text = generated_edf(built.recipe, ROOT, site, built.image_network).text
    return tomllib.loads(text).get("env", {})


# --- LUMI ---------------------------------------------------------------------------------

def test_lumi_rocm7_images_get_no_forced_gdr_level_and_dmabuf_off() -> None:
    env = edf_env("rocm-7.0.2", "lumi")
    assert "NCCL_NET_GDR_LEVEL" not in env  # the value that hangs ROCm 7.0 on LUMI
    assert env["NCCL_DMABUF_ENABLE"] == "0" and env["FI_HMEM_ROCR_USE_DMABUF"] == "0"
    assert env["HSA_NO_SCRATCH_RECLAIM"] == "1"
    job = resolve({}, load_site("lumi", ROOT), plan("rocm-7.0.2").image_network)
    assert "NCCL_NET_GDR_LEVEL" not in job.env and job.env["NCCL_DMABUF_ENABLE"] == "0"


def test_lumi_rocm6_images_keep_the_gdr_level_and_dmabuf() -> None:
    env = edf_env("rocm-6.4.4", "lumi")
    assert env["NCCL_NET_GDR_LEVEL"] == "3"
    assert "NCCL_DMABUF_ENABLE" not in env and "FI_HMEM_ROCR_USE_DMABUF" not in env


@pytest.mark.parametrize("recipe", ["rocm-7.1.1", "rocm-7.2.4"])
def test_lumi_is_off_recipes_above_its_driver(recipe: str) -> None:
    built = plan(recipe)
    assert "lumi" not in built.recipe.sites
    with pytest.raises(RenderError, match=r"runs ROCm up to 7\.0.*ROCm 7\.[12]"):
        generated_edf(built.recipe, ROOT, "lumi", built.image_network)
    # A recipe that names lumi anyway is refused when its plan is made (render, build).
    naming = dataclasses.replace(built.recipe, sites=("lumi", "cscs-beverin"))
    with pytest.raises(RenderError, match=r"sites: site lumi runs ROCm up to 7\.0"):
        plan_inputs(naming, ROOT)


def test_every_recipe_naming_a_site_is_within_its_driver() -> None:
    for name in recipe_names(ROOT):
        recipe = load_recipe(name, ROOT)
        for site_name in recipe.sites:
            site = load_site(site_name, ROOT)
            assert not site.rocm.too_new(recipe.rocm), f"{name} names {site_name}"


def _sbatch(nodes: int, rocm: str) -> str:
    site = load_site("lumi", ROOT)
    network = ImageNetwork(plugin=plan("rocm-7.0.2").image_network.plugin, verbs=True,
                           rocm=rocm)
    defaults = resolve({}, site, network)
    spec = SbatchSpec(nodes=nodes, gpus_per_node=8, single_node_srun=defaults.single_node_srun,
                      site_env=tuple(sorted(defaults.env.items())))
    invocation = Invocation(launcher="sbatch", runner_args=("--allow-cpu",), gpus="rocm")
    return sbatch_script(Target("sif", "/scratch/x.sif"), invocation, spec)


def test_lumi_single_node_rocm7_jobs_get_the_single_node_vni() -> None:
    one = _sbatch(1, "7.0.2")
    steps = [line for line in one.splitlines() if line.startswith("srun")]
    assert steps and all("--network=single_node_vni" in line for line in steps)
    assert "--network=single_node_vni" not in _sbatch(2, "7.0.2")
    assert "--network=single_node_vni" not in _sbatch(1, "6.4.4")


# --- InfiniBand ---------------------------------------------------------------------------

@pytest.mark.parametrize("recipe", recipe_names(ROOT))
def test_infiniband_images_carry_the_verbs_providers(recipe: str) -> None:
    built = plan(recipe)
    assert "ibverbs-providers" in built.runtime_packages
    site = load_site("mi300x-ib", ROOT)
    assert resolve({}, site, built.image_network).env["NCCL_NET"] == "IB"
    assert edf_env(recipe, "mi300x-ib")["NCCL_NET"] == "IB"


# --- Frontier -----------------------------------------------------------------------------

def test_frontier_profile() -> None:
    site = load_site("frontier", ROOT)
    assert (site.gpu, site.gpu_targets, site.formats) == ("MI250X", ("gfx90a",), ("sif",))
    assert (site.slurm.gpus_per_node, site.slurm.cpus_per_task) == (8, 7)
    assert site.network.provider == "cxi" and site.network.plugin == "image"
    job = resolve({}, site, plan("rocm-7.0.2").image_network)
    assert job.env["NCCL_SOCKET_IFNAME"] == "hsn0" and job.env["GLOO_SOCKET_IFNAME"] == "hsn0"
    assert job.env["FI_PROVIDER"] == "cxi" and job.library_dir == "/opt/cray/libfabric/*/lib64"
    assert "NCCL_NET_GDR_LEVEL" not in job.env


# --- the aws-ofi-nccl floor ---------------------------------------------------------------

def _with_plugin_ref(recipe: Recipe, ref: str) -> Recipe:
    section: Any = recipe.components["network_plugin"]
    source = GitSource(section.source.repository, ref)
    return dataclasses.replace(recipe, components={
        **recipe.components, "network_plugin": dataclasses.replace(section, source=source)})


def test_shipped_aws_ofi_nccl_is_at_least_1_20() -> None:
    for name in recipe_names(ROOT):
        plugin = plan(name).image_network.plugin
        if plugin is not None and plugin.kind == "aws-ofi-nccl":
            assert plugin.release_tuple is not None and plugin.release_tuple >= (1, 20, 0), name


def test_a_plugin_below_1_20_is_refused_where_a_site_sets_nccl_proto() -> None:
    recipe = _with_plugin_ref(load_recipe("rocm-7.2.4", ROOT), "v1.18.0")
    with pytest.raises(RenderError, match=r"aws-ofi-nccl 1\.18\.0 with NCCL_PROTO set.*"
                                          r"site cscs-beverin"):
        make_plan(recipe, None, plan_inputs(recipe, ROOT))
    fine = _with_plugin_ref(load_recipe("rocm-7.2.4", ROOT), "v1.20.0")
    assert make_plan(fine, None, plan_inputs(fine, ROOT)).image_network.plugin is not None


def test_an_edf_for_an_old_plugin_at_a_site_setting_nccl_proto_is_refused() -> None:
    old = NetPlugin("aws-ofi-nccl", "/opt/aws-ofi-nccl/lib/librccl-net.so", "1.18.0", "1.22.0")
    with pytest.raises(RenderError, match="NCCL_PROTO"):
        resolve({}, load_site("cscs-beverin", ROOT), ImageNetwork(old, False, "7.2.4"))
    # LUMI sets no protocol: the same plugin is not refused there.
    resolve({}, load_site("lumi", ROOT), ImageNetwork(old, False, "7.0.2"))


def test_the_floor_rule() -> None:
    old = NetPlugin("aws-ofi-nccl", "/p.so", "1.19.0", "1.22.0")
    assert below_floor(old, tuner=True) and below_floor(old, variables=["NCCL_ALGO"])
    assert below_floor(old, variables=["NCCL_DEBUG"]) is None
    assert below_floor(dataclasses.replace(old, release="1.20.0"), tuner=True) is None
    # ROCm's fork has its own history, and a branch names no release.
    assert below_floor(dataclasses.replace(old, kind="aws-ofi-rccl"), tuner=True) is None
    assert below_floor(dataclasses.replace(old, release=None), tuner=True) is None
    assert release_tuple("v1.21.1") == (1, 21, 1) and release_tuple("cxi") is None


def test_a_tuner_beside_a_plugin_below_1_20_is_refused() -> None:
    from imagebuild.components.protocol import ComponentPlan, PlanContext
    from imagebuild.components.rccl_tuner import component as rccl_tuner

    old = NetPlugin("aws-ofi-nccl", "/p.so", "1.18.0", "1.22.0")
    recipe = load_recipe("rocm-7.2.4", ROOT)
    needed = {"network_plugin": ComponentPlan(name="network_plugin", values=None,
                                              net_plugin=old)}
    context = PlanContext(recipe, None, None, plan_inputs(recipe, ROOT), needed)
    with pytest.raises(RenderError, match=r"rccl_tuner: aws-ofi-nccl 1\.18\.0 with a tuner"):
        rccl_tuner.plan(context)
    assert "network_plugin" in rccl_tuner.COMPONENT.needs
