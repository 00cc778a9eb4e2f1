"""The CXI stack component: its section, pins, stage and final steps as rendered, and its
build-time check's refusal. (Its build from the fixtures in an image is not yet a test.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.components import cxi_stack as _package  # noqa: F401  (the folder exists)
from imagebuild.components.cxi_stack.component import CxiStack, pins
from imagebuild.lock.model import ArchivePin, GitPin
from imagebuild.recipe.load import load_recipe
from imagebuild.render.dockerfile import generated_dockerfile
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


def test_the_stage_builds_libcxi_and_libfabric_with_cxi_and_checks_fi_info() -> None:
    recipe = load_recipe("rocm-7.2.4", ROOT).with_component("cxi_stack", STACK)
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
