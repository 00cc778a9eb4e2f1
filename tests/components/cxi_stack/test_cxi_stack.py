"""The CXI stack component: its section, pins, stage and final steps as rendered, the
network plugin built on its libfabric, the sites it may and may not serve, and its
build-time check's refusal. (Its build in an image: test_cxi_stack_build.py.)"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from imagebuild.components import cxi_stack as _package  # noqa: F401  (the folder exists)
from imagebuild.components.cxi_stack.component import CxiStack, pins
from imagebuild.components.network_plugin import component as network_plugin
from imagebuild.errors import RenderError
from imagebuild.lock.model import ArchivePin, GitPin
from imagebuild.recipe.load import load_recipe
from imagebuild.recipe.model import Recipe
from imagebuild.recipe.site import load_site
from imagebuild.render.dockerfile import generated_dockerfile
from imagebuild.render.edf import generated_edf
from imagebuild.render.edf_sarus import sarus_devices
from imagebuild.render.plan import plan_for

ROOT = Path(__file__).resolve().parents[3]
HPE = "https://github.com/HewlettPackard/"
STACK = CxiStack(enabled=True, ref="release/shs-13.1.0",
                 repositories=(("cassini-headers", HPE + "shs-cassini-headers.git"),
                               ("cxi-driver", HPE + "shs-cxi-driver.git"),
                               ("libcxi", HPE + "shs-libcxi.git")),
                 libfabric_version="2.6.0",
                 libfabric_url="https://github.com/ofiwg/libfabric/releases/download/v2.6.0/"
                               "libfabric-2.6.0.tar.bz2")


def test_it_pins_three_git_sources_and_the_libfabric_archive() -> None:
    found = pins(STACK, load_recipe("rocm-7.2.4", ROOT))
    assert [p.key for p in found if isinstance(p, GitPin)] == [
        "shs-cassini-headers", "shs-cxi-driver", "shs-libcxi"]
    assert all(p.source.ref == "release/shs-13.1.0" for p in found if isinstance(p, GitPin))
    assert [p.key for p in found if isinstance(p, ArchivePin)] == ["cxi-libfabric"]


def on_stack(name: str = "rocm-7.2.4", sites: tuple[str, ...] = ()) -> Recipe:
    """A shipped recipe with the CXI stack, for ``sites`` (none: no site's constraint)."""
    return replace(load_recipe(name, ROOT).with_component("cxi_stack", STACK), sites=sites)


def test_the_stage_builds_libcxi_and_libfabric_with_cxi_and_checks_fi_info() -> None:
    recipe = on_stack()
    plan = plan_for(recipe, None, ROOT)
    text = generated_dockerfile(plan, ROOT).text
    stage = text.split("FROM toolchain AS cxi-stack", 1)[1].split("\nFROM ", 1)[0]
    for name in ("shs-cassini-headers", "shs-cxi-driver", "shs-libcxi"):
        assert f"{HPE}{name}.git" in stage and f"/usr/src/shs/{name[4:]}" in stage
    assert "./configure --prefix=/opt/cxi-stack --enable-cxi=/opt/cxi-stack" in stage
    assert "-I/usr/src/shs/cxi-driver/include" in stage
    assert "python3 /tmp/imagebuild/cxi-stack-check.py /opt/cxi-stack" in stage
    assert "UNLOCKED" in stage  # no sha256 yet: the archive step refuses to run
    assert "COPY --from=cxi-stack /opt/cxi-stack /opt/cxi-stack" in text
    assert {"libjson-c-dev", "libcurl4-openssl-dev", "libconfig-dev"} <= set(plan.build_packages)
    assert "/opt/cxi-stack/lib/libfabric.so.1" in plan.linked_files
    # The context stages its check (build_context copies each part's scripts).
    assert [name for name, _ in plan.parts["cxi_stack"].scripts] == ["cxi-stack-check.py"]
    # Off by default: the shipped recipes' Dockerfiles have no such stage.
    assert "cxi-stack" not in generated_dockerfile(plan_for(load_recipe("rocm-7.2.4", ROOT),
                                                            None, ROOT), ROOT).text


@pytest.mark.parametrize("listed", ["tcp:\nudp:\nshm:\n", ""])
def test_the_check_fails_without_the_cxi_provider(tmp_path: Path, listed: str) -> None:
    fi_info = tmp_path / "prefix" / "bin" / "fi_info"
    fi_info.parent.mkdir(parents=True)
    fi_info.write_text(f"#!/bin/sh\nprintf '{listed}'\n")
    fi_info.chmod(0o755)
    scripts = ROOT / "imagebuild" / "render" / "scripts"
    check = ROOT / "imagebuild" / "components" / "cxi_stack" / "check.py"
    done = subprocess.run([sys.executable, str(check), str(tmp_path / "prefix"), "--record",
                           str(tmp_path / "out.json")], capture_output=True, text=True,
                          env={"PYTHONPATH": str(scripts), "PATH": "/usr/bin:/bin"},
                          check=False)
    assert done.returncode != 0 and "has no cxi provider" in done.stderr
    assert not (tmp_path / "out.json").exists()


def test_the_plugin_is_built_on_the_stack_s_libfabric_and_pins_no_other() -> None:
    recipe = on_stack()
    plan = plan_for(recipe, None, ROOT)
    text = generated_dockerfile(plan, ROOT).text
    stage = text.split("FROM cxi-stack AS plugin", 1)[1].split("\nFROM ", 1)[0]
    assert "--with-libfabric=/opt/cxi-stack" in stage
    assert "--libfabric-dir /opt/cxi-stack/lib --built-against 2.6.0" in stage
    assert "libfabric.tar" not in stage and "FROM toolchain AS plugin" not in text
    assert "COPY --from=plugin /opt/libfabric" not in text
    section = network_plugin.section(recipe)
    assert section is not None
    assert [p.key for p in network_plugin.pins(section, recipe)] == ["network-plugin"]
    assert [p.key for p in network_plugin.pins(section, on_stack().with_component(
        "cxi_stack", replace(STACK, enabled=False)))] == ["network-plugin", "libfabric"]
    assert plan.parts["network_plugin"].net_plugin.providers == ("cxi",)


def test_a_site_whose_hook_binds_its_own_libfabric_refuses_a_plugin_on_the_stack() -> None:
    """Beverin's profile keeps the host's stack (the CXI hook swaps libfabric 1.22 in): a
    plugin built on the image's libfabric 2.6 would not load there."""
    with pytest.raises(RenderError, match="needs FABRIC_1.9, which libfabric 1.22.0"):
        plan_for(on_stack(sites=("cscs-beverin",)), None, ROOT)


def test_the_own_stack_profile_runs_an_image_with_the_stack_with_the_hook_off() -> None:
    site = "cscs-beverin-own-stack"
    plan = plan_for(on_stack(sites=(site,)), None, ROOT)
    edf = tomllib.loads(generated_edf(plan.recipe, ROOT, site, plan.image_network).text)
    assert edf["annotations"]["com"]["hooks"]["cxi"]["enabled"] == "false"
    assert edf["env"]["NCCL_NET"] == "AWS Libfabric" and edf["env"]["FI_PROVIDER"] == "cxi"
    assert edf["env"]["FI_CXI_RX_MATCH_MODE"] == "hybrid"
    # Sarus Suite: the CXI devices, not the device that swaps the host's libfabric in.
    devices = sarus_devices(load_site(site, ROOT), plan.image_network)
    assert "hpe.com/cxi=all" in devices and "alps.cscs/cxi=all" not in devices
    assert "alps.cscs/cxi=all" in sarus_devices(load_site("cscs-beverin", ROOT),
                                                plan_for(load_recipe("rocm-7.2.4", ROOT), None,
                                                         ROOT).image_network)


def test_the_own_stack_profile_refuses_an_image_without_the_stack() -> None:
    shipped = plan_for(load_recipe("rocm-7.2.4", ROOT), None, ROOT)
    with pytest.raises(RenderError, match="has only the built-in providers"):
        generated_edf(shipped.recipe, ROOT, "cscs-beverin-own-stack", shipped.image_network)
    with pytest.raises(RenderError, match="does not have"):
        plan_for(replace(load_recipe("rocm-7.2.4", ROOT), sites=("cscs-beverin-own-stack",)),
                 None, ROOT)
