"""EDF rendering: parsed with tomllib and checked against the documented EDF keys."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from imagebuild.errors import SiteProfileError, SquashError
from imagebuild.recipe.site import load_site, parse_site, site_names
from imagebuild.render.edf import edf_image_path, flatten_annotations, render_edf

#: The EDF keys CSCS documents (https://docs.cscs.ch/software/container-engine/) and their types.
DOCUMENTED = {"image": str, "base_environment": (str, list), "workdir": str,
              "entrypoint": bool, "writable": bool, "mounts": list, "env": dict,
              "annotations": dict}
BEVERIN_ENV = {
    "NCCL_CROSS_NIC": "1", "NCCL_NET": "AWS Libfabric", "NCCL_NET_GDR_LEVEL": "PHB",
    "NCCL_PROTO": "^LL128", "FI_CXI_DEFAULT_CQ_SIZE": "131072",
    "FI_CXI_DEFAULT_TX_SIZE": "32768", "FI_CXI_DISABLE_HOST_REGISTER": "1",
    "FI_MR_CACHE_MONITOR": "userfaultfd", "FI_CXI_RDZV_EAGER_SIZE": "0",
    "FI_CXI_RDZV_GET_MIN": "0", "FI_CXI_RDZV_THRESHOLD": "0", "HSA_NO_SCRATCH_RECLAIM": "1",
    "FI_CXI_RX_MATCH_MODE": "software",
    # network.plugin image with provider cxi: libfabric may use only CXI, never TCP
    "FI_PROVIDER": "cxi",
    # fork safety for the CXI provider (nothing else sets it with the hook off)
    "CXI_FORK_SAFE": "1", "CXI_FORK_SAFE_HP": "1",
    # MIOpen's database and kernel cache node-local, without SQLite's write-ahead log
    "MIOPEN_USER_DB_PATH": "/tmp/${USER}-miopen-cache",
    "MIOPEN_CUSTOM_CACHE_DIR": "/tmp/${USER}-miopen-cache", "MIOPEN_DEBUG_DISABLE_SQL_WAL": "1",
    # network.socket_ifname, for NCCL's bootstrap and gloo alike
    "NCCL_SOCKET_IFNAME": "hsn0,hsn1,hsn2,hsn3", "GLOO_SOCKET_IFNAME": "hsn0,hsn1,hsn2,hsn3",
}


def render(site: str, rocm: str | None, **kw) -> tuple[str, dict]:  # type: ignore[no-untyped-def]
    profile = load_site(site)
    text = render_edf(recipe="rocm-x", image=kw.pop("image", "/images/rocm-x.sqsh"),
                      site=profile, rocm_version=rocm, workdir=kw.pop("workdir", "/workspace"),
                      image_sha256="ab" * 32, **kw)
    return text, tomllib.loads(text)


def check_documented(edf: dict) -> None:
    for key, value in edf.items():
        assert key in DOCUMENTED, f"undocumented EDF key {key!r}"
        assert isinstance(value, DOCUMENTED[key]), key
    assert all(isinstance(m, str) and m.count(":") in (1, 2) for m in edf.get("mounts", []))
    assert all(isinstance(v, str) for v in edf.get("env", {}).values())
    assert all(isinstance(v, str) for v in flatten_annotations(edf.get("annotations", {}))
               .values())


def test_shipped_sites_load() -> None:
    assert {"cscs-beverin", "lumi"} <= set(site_names())
    for name in site_names():
        assert load_site(name).name == name


def test_beverin_rocm6_uses_the_images_plugin_not_the_hook() -> None:
    # One plugin per job: the image's aws-ofi-rccl (NCCL_NET_PLUGIN, set by the image), so
    # the Container Engine's aws_ofi_nccl hook (variant rocm6) stays off.
    text, edf = render("cscs-beverin", "6.4.4")
    check_documented(edf)
    assert edf["image"] == "/images/rocm-x.sqsh"
    assert edf["workdir"] == "${PWD}"  # the site's workdir wins over the image's
    assert edf["writable"] is True
    assert edf["env"] == BEVERIN_ENV
    assert "NCCL_NET_PLUGIN" not in edf["env"]  # the image's value stands
    assert flatten_annotations(edf["annotations"]) == {"com.hooks.cxi.enabled": "true"}
    assert "aws_ofi_nccl hook: off; the image's own RCCL network plugin is used" in text
    # written as CSCS documents it: dotted keys under [annotations]
    assert '\ncom.hooks.cxi.enabled = "true"\n' in text


def test_beverin_rocm7_leaves_the_hook_off() -> None:
    text, edf = render("cscs-beverin", "7.0.2")
    check_documented(edf)
    assert flatten_annotations(edf["annotations"]) == {"com.hooks.cxi.enabled": "true"}
    assert "aws_ofi_nccl hook: off; the image's own RCCL network plugin is used" in text


HOOK_SITE = """\
name: hooked
network: {provider: cxi, plugin: %s}
edf:
  annotations: {com.hooks.cxi.enabled: "true"}
  aws_ofi_nccl_hook:
    annotation_prefix: com.hooks.aws_ofi_nccl
    variants: {rocm6: 6}
"""


def test_the_sites_plugin_enables_the_hook_and_unsets_the_images() -> None:
    site = parse_site((HOOK_SITE % "site").encode(), "sites/hooked.yaml")
    text = render_edf(recipe="r", image="/i.sqsh", site=site, rocm_version="6.4.4")
    edf = tomllib.loads(text)
    assert flatten_annotations(edf["annotations"]) == {
        "com.hooks.cxi.enabled": "true", "com.hooks.aws_ofi_nccl.enabled": "true",
        "com.hooks.aws_ofi_nccl.variant": "rocm6"}
    # an empty value unsets the image's NCCL_NET_PLUGIN, so RCCL loads the hook's plugin
    assert edf["env"]["NCCL_NET_PLUGIN"] == ""
    assert "FI_PROVIDER" not in edf["env"]
    assert "aws_ofi_nccl hook: on, variant rocm6 matches ROCm 6" in text
    # no variant for this ROCm: refused, not silently the other plugin
    with pytest.raises(SquashError, match=r"no variant for ROCm 7 .*network.plugin: image"):
        render_edf(recipe="r", image="/i.sqsh", site=site, rocm_version="7.0.2")


def test_the_images_plugin_never_enables_a_matching_hook() -> None:
    site = parse_site((HOOK_SITE % "image").encode(), "sites/hooked.yaml")
    edf = tomllib.loads(render_edf(recipe="r", image="/i.sqsh", site=site, rocm_version="6.4.4"))
    assert flatten_annotations(edf["annotations"]) == {"com.hooks.cxi.enabled": "true"}
    assert edf["env"] == {"FI_PROVIDER": "cxi"}


def test_an_infiniband_site_keeps_rccl_off_the_plugin() -> None:
    site = parse_site(b"name: ib\nnetwork: {plugin: none}\n", "sites/ib.yaml")
    text = render_edf(recipe="r", image="/i.sqsh", site=site, rocm_version="7.2.4")
    assert tomllib.loads(text)["env"] == {"NCCL_NET": "IB"}
    assert "RCCL's own InfiniBand/RoCE transport is used" in text


def test_cpu_only_image_has_no_hook() -> None:
    _, edf = render("cscs-beverin", None)
    assert set(flatten_annotations(edf["annotations"])) == {"com.hooks.cxi.enabled"}


def test_lumi_profile() -> None:
    _, edf = render("lumi", "7.0.2")
    check_documented(edf)
    # What the CXI provider needs bound from the host, the Cray libfabric first on the
    # loader path (ahead of the image's, which only the loader cache knows), and the
    # variables Slingshot needs for forked processes.
    assert edf["mounts"] == ["/opt/cray:/opt/cray:ro", "/var/spool/slurmd:/var/spool/slurmd",
                             "/usr/lib64/libcxi.so.1:/usr/lib64/libcxi.so.1",
                             "/pfs:/pfs", "/scratch:/scratch", "/projappl:/projappl",
                             "/project:/project", "/flash:/flash", "/appl:/appl"]
    assert edf["env"] == {
        "FI_PROVIDER": "cxi",
        "LD_LIBRARY_PATH": "/opt/cray/libfabric/1.22.0/lib64:${LD_LIBRARY_PATH}",
        "CXI_FORK_SAFE": "1", "CXI_FORK_SAFE_HP": "1", "FI_CXI_DISABLE_CQ_HUGETLB": "1",
        "NCCL_SOCKET_IFNAME": "hsn0,hsn1,hsn2,hsn3", "GLOO_SOCKET_IFNAME": "hsn0,hsn1,hsn2,hsn3",
        # ROCm 7.0 on LUMI: no forced GDR level (it hangs), DMA-BUF off (lumi.yaml, rocm).
        "NCCL_DMABUF_ENABLE": "0", "FI_HMEM_ROCR_USE_DMABUF": "0", "HSA_NO_SCRATCH_RECLAIM": "1",
        "MIOPEN_USER_DB_PATH": "/tmp/${USER}-miopen-cache-${SLURM_NODEID}",
        "MIOPEN_CUSTOM_CACHE_DIR": "/tmp/${USER}-miopen-cache-${SLURM_NODEID}"}
    assert "annotations" not in edf
    assert load_site("lumi").formats == ("sif",)


def test_beverin_mounts_the_users_file_systems_and_binds_nothing_the_cxi_hook_brings() -> None:
    _, edf = render("cscs-beverin", "7.0.2")
    # EDF-only, no site binds: scratch, the file systems users keep data and checkouts on,
    # and the directory the job starts in, which is also the working directory (a report
    # written there survives the container)
    assert edf["mounts"] == ["${SCRATCH}:${SCRATCH}", "/capstor:/capstor", "/iopsstor:/iopsstor",
                             "${PWD}:${PWD}"]
    assert edf["workdir"] == "${PWD}"
    assert "LD_LIBRARY_PATH" not in edf["env"]  # the hook replaces libfabric in place


def test_container_binds_and_edf_mounts_merge_without_duplicates(tmp_path: Path) -> None:
    site = parse_site(b"""\
name: both
container:
  binds: ["/opt/vendor:/opt/vendor:ro"]
  env: {A: "1"}
edf:
  mounts: ["/opt/vendor:/opt/vendor:ro", "${SCRATCH}:${SCRATCH}"]
  env: {A: "2", B: "3"}
libfabric: {provided_by: site, version: "1.22.0", library_dir: /opt/vendor/lib64}
""", "sites/both.yaml")
    edf = tomllib.loads(render_edf(recipe="r", image="/i.sqsh", site=site, rocm_version="7.0.2"))
    assert edf["mounts"] == ["/opt/vendor:/opt/vendor:ro", "${SCRATCH}:${SCRATCH}"]
    # EDF-only entries win over the every-runtime ones (they are the more specific).
    assert edf["env"] == {"A": "2", "B": "3",
                          "LD_LIBRARY_PATH": "/opt/vendor/lib64:${LD_LIBRARY_PATH}"}


def test_header_names_inputs_and_changes_with_them() -> None:
    text, _ = render("cscs-beverin", "7.0.2")
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert any("site profile: imagebuild/data/sites/cscs-beverin.yaml sha256:" in h
               for h in header)
    assert any(h.startswith("# input-hash: sha256:") for h in header)
    again, _ = render("cscs-beverin", "7.0.2")
    assert again == text  # pure
    other, _ = render("cscs-beverin", "7.0.2", image="/elsewhere/rocm-x.sqsh")
    assert input_hash_line(other) != input_hash_line(text)


def input_hash_line(text: str) -> str:
    return next(x for x in text.splitlines() if x.startswith("# input-hash"))


def test_image_path_from_site_image_dir(tmp_path: Path) -> None:
    beverin = load_site("cscs-beverin")
    assert edf_image_path(beverin, tmp_path / "rocm-x.sqsh") == "${SCRATCH}/imagebuild/rocm-x.sqsh"
    lumi = load_site("lumi")
    assert edf_image_path(lumi, tmp_path / "rocm-x.sqsh") == str(tmp_path / "rocm-x.sqsh")


def test_project_site_overrides_and_adds(tmp_path: Path) -> None:
    (tmp_path / "sites").mkdir()
    (tmp_path / "sites" / "mysite.yaml").write_text(
        "name: mysite\nformats: [sqsh]\nedf:\n  writable: false\n  env: {A: 'b'}\n")
    site = load_site("mysite", tmp_path)
    assert site.writable is False and site.env == (("A", "b"),)
    assert "mysite" in site_names(tmp_path)


def test_invalid_profile_reports_every_problem_with_lines() -> None:
    text = b"""name: Bad Name
formats: [sqsh, tar]
edf:
  writable: "yes"
  mounts: ["/only-one-side"]
  env:
    NCCL_NET_GDR_LEVEL: 3
  colour: blue
  aws_ofi_nccl_hook:
    annotation_prefix: com.hooks.aws_ofi_nccl
    variants: {rocm6: six}
"""
    with pytest.raises(SiteProfileError) as info:
        parse_site(text, "sites/bad.yaml")
    lines = str(info.value).splitlines()
    assert "sites/bad.yaml:1: name: expected lowercase letters, digits, '-' or '.'" in lines
    assert "sites/bad.yaml:2: formats: unknown format 'tar' (expected sqsh or sif)" in lines
    assert any(x.startswith("sites/bad.yaml:4: edf.writable: expected true or false")
               for x in lines)
    assert any(x.startswith("sites/bad.yaml:5: edf.mounts: '/only-one-side'") for x in lines)
    assert any(x.startswith("sites/bad.yaml:7: edf.env.NCCL_NET_GDR_LEVEL: expected a string")
               for x in lines)
    assert any(x.startswith("sites/bad.yaml:8: edf.colour: unknown key") for x in lines)
    assert any(x.startswith("sites/bad.yaml:11: edf.aws_ofi_nccl_hook.variants:") for x in lines)


def test_unknown_site_lists_known_ones() -> None:
    with pytest.raises(SquashError, match=r"no site profile 'nowhere' \(known: .*cscs-beverin"):
        load_site("nowhere")
