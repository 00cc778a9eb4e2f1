"""The environment the doctor checks a node with is the one the image's jobs get: fitted to
what the image carries, as the EDF and the batch job are."""

from __future__ import annotations

from pathlib import Path

from imagebuild.doctor.image_needs import needs_for_recipe
from imagebuild.doctor.site_settings import doctor_settings
from imagebuild.recipe.load import load_recipe
from imagebuild.recipe.site import load_site
from tests.components.cxi_stack.test_cxi_stack import STACK

ROOT = Path(__file__).resolve().parents[2]


def test_an_image_without_a_plugin_is_checked_without_the_plugin_settings(tmp_path: Path
                                                                          ) -> None:
    site = load_site("cscs-beverin", ROOT)
    bare = doctor_settings(site, {}, tmp_path, needs=needs_for_recipe(
        load_recipe("rocm-7.14.1", ROOT)))
    assert "NCCL_NET" not in bare.env and "FI_PROVIDER" not in bare.env
    assert not any(key.startswith(("FI_", "CXI_")) for key in bare.env)
    assert bare.env["NCCL_SOCKET_IFNAME"] == "hsn0,hsn1,hsn2,hsn3"
    with_plugin = doctor_settings(site, {}, tmp_path, needs=needs_for_recipe(
        load_recipe("rocm-7.2.4", ROOT)))
    assert with_plugin.env["NCCL_NET"] == "AWS Libfabric"
    assert with_plugin.env["FI_PROVIDER"] == "cxi"
    # Unknown content (no image named): the profile as written.
    assert doctor_settings(site, {}, tmp_path).env["NCCL_NET"] == "AWS Libfabric"


def test_a_plugin_on_the_cxi_stack_needs_what_its_libfabric_defines() -> None:
    """The doctor's symbol-version need is the libfabric the plugin links: 2.6.0's
    FABRIC_1.9 on the image's CXI stack, 1.22.0's FABRIC_1.7 otherwise."""
    recipe = load_recipe("rocm-7.2.4", ROOT)
    assert needs_for_recipe(recipe).fabric_needs == ("FABRIC_1.7",)
    assert needs_for_recipe(recipe.with_component("cxi_stack", STACK)).fabric_needs == (
        "FABRIC_1.9",)
