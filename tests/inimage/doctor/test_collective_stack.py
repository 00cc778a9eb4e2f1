"""The doctor's items on the collectives' stack, each failure beside the case that passes:
rccl-p2p (the kernel against RCCL's cuMem need, with the runtime), plugin (aws-ofi-nccl's
release against its known-bad ranges) and tuners (the plugin's tuner beside imagebuild's).
The trees are the fixture nodes (Beverin MI300A, MI300X) with the case's kernel, runtime
marks and gcc-built plugins; the images are manifests as the build writes them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.components.network_plugin.component import section as network_plugin_section
from imagebuild.doctor.image_needs import needs_for_recipe
from imagebuild.doctor.site_settings import doctor_settings, inside_image
from imagebuild.inimage.doctor.finding import FAIL, PASS, SKIP, WARN
from imagebuild.inimage.doctor.needs import needs_from_manifest, release_of
from imagebuild.inimage.doctor.run import run_doctor
from imagebuild.recipe.load import load_recipe
from imagebuild.recipe.site import load_site
from tests.inimage.doctor.conftest import NodeCase, build_case
from tests.inimage.doctor.test_node_cases import doctor


def item(node_cases: dict[str, NodeCase], name: str, which: str) -> tuple[str, str, str]:
    return doctor(node_cases[name])[which]


# --- rccl-p2p ------------------------------------------------------------------------------

def test_a_two_node_enroot_job_on_a_6_4_kernel_fails_with_the_workaround(
        node_cases: dict[str, NodeCase]) -> None:
    status, reason, fix = item(node_cases, "cumem-enroot-two-nodes-beverin", "rccl-p2p")
    assert status == FAIL
    assert "kernel 6.4.0-150600.23.53_15.0.18-cray_shasta_c is below 6.8" in reason
    assert "RCCL 2.30.4" in reason and "under enroot" in reason and "2-node job" in reason
    assert "NCCL_P2P_DISABLE=1" in fix and "Podman" in fix


@pytest.mark.parametrize(("name", "because"), [
    ("cumem-podman-beverin", "the runtime is Podman (/run/.containerenv"),
    ("cumem-p2p-disabled-beverin", "NCCL_P2P_DISABLE=1 is set"),
    ("cumem-kernel-6.8-mi300x", "kernel 6.8.0-45-generic (>= 6.8)"),
])
def test_podman_the_workaround_or_a_6_8_kernel_pass(node_cases: dict[str, NodeCase], name: str,
                                                    because: str) -> None:
    status, reason, _ = item(node_cases, name, "rccl-p2p")
    assert status == PASS, reason
    assert because in reason


def test_one_node_or_no_job_warns_and_an_older_rccl_does_not_apply(
        node_cases: dict[str, NodeCase]) -> None:
    case = node_cases["cumem-enroot-two-nodes-beverin"]
    for nodes in ("1", None):
        env = {k: v for k, v in case.env.items() if k != "SLURM_JOB_NUM_NODES"}
        if nodes:
            env["SLURM_JOB_NUM_NODES"] = nodes
        status, reason, fix = doctor(replace(case, env=env))["rccl-p2p"]
        assert status == WARN and "multi-node jobs of this image risk it" in reason
        assert "NCCL_P2P_DISABLE=1" in fix
    older = replace(case, manifest={**case.manifest, "rocm_version": "7.2.4"})
    status, reason, _ = doctor(older)["rccl-p2p"]
    assert status == SKIP and "RCCL 2.27.7 (ROCm 7.2's)" in reason
    pinned = replace(case, manifest={**case.manifest, "rocm_version": "7.2.4",
                                     "rccl": {"version": "2.30.4"}})
    assert doctor(pinned)["rccl-p2p"][0] == FAIL  # a pinned RCCL counts, not the base's


def test_from_the_host_the_runtime_comes_from_the_launch_or_the_site(
        node_cases: dict[str, NodeCase]) -> None:
    case = node_cases["cumem-enroot-two-nodes-beverin"]
    needs = needs_from_manifest(case.manifest)
    site = load_site("cscs-beverin")
    from_site = doctor_settings(site, case.env, case.root)
    assert from_site.runtime == "enroot" and "runs .sqsh images" in from_site.runtime_from
    assert {f.item: f.status for f in run_doctor(needs, from_site)}["rccl-p2p"] == FAIL
    podman = doctor_settings(site, case.env, case.root, runtime="podman",
                             runtime_from="--launcher podman")
    assert {f.item: f.status for f in run_doctor(needs, podman)}["rccl-p2p"] == PASS
    # inside the image the container's marks decide, not what the site implies
    assert inside_image(from_site).runtime is None
    assert inside_image(podman).runtime == "podman"


def test_the_doctor_command_fails_a_shipped_therock_recipe_on_a_6_4_node(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    case = build_case("cumem-enroot-two-nodes-beverin", tmp_path)
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    code = main(["doctor", "rocm-7.14.1", "--site", "cscs-beverin", "--root", str(case.root)])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "FAIL  rccl-p2p" in out and "fix: set NCCL_P2P_DISABLE=1" in out
    code = main(["doctor", "rocm-7.14.1", "--site", "cscs-beverin", "--runtime", "podman",
                 "--root", str(case.root)])
    out = capsys.readouterr().out
    assert "PASS  rccl-p2p" in out and "passed 80/80" in out


# --- plugin --------------------------------------------------------------------------------

def test_aws_ofi_nccl_1_18_on_rocm_7_mi300_warns_1_21_passes(
        node_cases: dict[str, NodeCase]) -> None:
    status, reason, fix = item(node_cases, "plugin-1.18-rocm7-mi300x", "plugin")
    assert status == WARN
    assert "aws-ofi-nccl 1.18.0: its DMA-BUF detection fails on ROCm 7.x" in reason
    assert "aws-ofi-nccl >= 1.20.0" in fix and "OFI_NCCL_DISABLE_DMABUF=1" in fix
    status, reason, _ = item(node_cases, "plugin-1.21-rocm7-mi300x", "plugin")
    assert status == PASS and "1.21.1: past every known-bad range" in reason


def test_the_plugins_own_tuner_with_nccl_proto_warns_until_1_20(
        node_cases: dict[str, NodeCase]) -> None:
    case = node_cases["plugin-tuner-proto-mi300x"]
    status, reason, fix = doctor(case)["plugin"]
    assert status == WARN and "its tuner crashes when NCCL_ALGO or NCCL_PROTO is set" in reason
    assert "unset NCCL_ALGO and NCCL_PROTO" in fix
    quiet = replace(case, env={k: v for k, v in case.env.items() if k != "NCCL_PROTO"})
    status, reason, _ = doctor(quiet)["plugin"]
    assert status == PASS and "none of its known failures applies here" in reason
    assert "its own tuner with NCCL_ALGO/NCCL_PROTO" in reason
    old = replace(case, manifest={**case.manifest, "network_plugin": {
        **case.manifest["network_plugin"], "ref": "v1.16.2"}})
    assert "aws/aws-ofi-nccl#982" in doctor(old)["plugin"][1]


def test_from_the_host_an_unknown_tuner_is_said_and_the_ranges_stay_upstreams(
        node_cases: dict[str, NodeCase]) -> None:
    case = node_cases["plugin-tuner-proto-mi300x"]
    host = replace(case, in_image=False)
    status, reason, fix = doctor(host)["plugin"]
    assert status == WARN and "read from its symbols inside the image" in reason
    assert "python -m imagebuild_checks doctor" in fix
    fork = replace(case, manifest={**case.manifest, "network_plugin": {
        **case.manifest["network_plugin"], "kind": "aws-ofi-rccl", "ref": "cxi"}})
    status, reason, _ = doctor(fork)["plugin"]
    assert status == SKIP and "aws-ofi-rccl" in reason


# --- tuners --------------------------------------------------------------------------------

def test_two_tuners_with_the_plugins_winning_warn_and_the_images_named_passes(
        node_cases: dict[str, NodeCase]) -> None:
    status, reason, fix = item(node_cases, "two-tuners-mi300x", "tuners")
    assert status == WARN
    assert "RCCL loads /opt/aws-ofi-nccl/lib/librccl-net.so" in reason
    assert "NCCL_TUNER_CONFIG_FILE=/opt/imagebuild/tuning/nccl_tuner.conf is read by no tuner" \
        in reason
    assert fix.startswith("set NCCL_TUNER_PLUGIN=/opt/rccl-tuner/lib/librccl-tuner.so")
    status, reason, _ = item(node_cases, "two-tuners-named-mi300x", "tuners")
    assert status == PASS
    assert "RCCL loads one, imagebuild's /opt/rccl-tuner/lib/librccl-tuner.so" in reason
    assert "ncclTunerPlugin_v3" in reason


def test_a_job_naming_another_tuner_over_the_images_warns_from_the_host(
        node_cases: dict[str, NodeCase]) -> None:
    """CSCS's optimized Megatron check names its own tuner library on /capstor."""
    case = node_cases["two-tuners-named-mi300x"]
    capstor = "/capstor/store/cscs/cscs/public/reframe/resources/rccl-tuner/libnccl-tuner.so"
    host = replace(case, in_image=False, env={**case.env, "NCCL_TUNER_PLUGIN": capstor})
    status, reason, _ = doctor(host)["tuners"]
    assert status == WARN and f"RCCL loads {capstor}" in reason
    image_default = replace(case, in_image=False, env={
        k: v for k, v in case.env.items() if k != "NCCL_TUNER_PLUGIN"})
    assert doctor(image_default)["tuners"][0] == PASS  # the image's ENV names its tuner


# --- what the doctor reads --------------------------------------------------------------------

def test_the_manifest_and_the_recipe_give_the_plugin_release_and_the_tuner() -> None:
    assert release_of("v1.18.0") == "1.18.0" and release_of("v1.13.2-aws") == "1.13.2"
    assert release_of("cxi") is None and release_of("2475c4c736907e68") is None
    recipe = needs_for_recipe(load_recipe("rocm-7.2.4"))
    plugin = network_plugin_section(load_recipe("rocm-7.2.4"))
    assert plugin is not None
    assert recipe.plugin_kind == "aws-ofi-nccl" and recipe.plugin_version == release_of(
        plugin.source.ref)
    assert recipe.plugin_tuner == ()  # built with --disable-platform-aws: no tuner in it
    therock = needs_for_recipe(load_recipe("rocm-7.14.1"))
    assert therock.plugin is False and therock.plugin_version is None
