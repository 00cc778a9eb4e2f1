"""The site profile's launch sections (container, network, slurm, apptainer): parsed into
frozen settings, every problem reported at once with its line and key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.errors import SiteProfileError
from imagebuild.recipe.site import load_site, parse_site
from imagebuild.recipe.site_runtime import Bind, loader_dir, parse_bind, site_binds, site_env


def test_shipped_profiles_carry_their_launch_values() -> None:
    lumi = load_site("lumi")
    assert lumi.network.provider == "cxi" and lumi.network.socket_ifname == "hsn0,hsn1,hsn2,hsn3"
    assert lumi.slurm.gpus_per_node == 8 and lumi.slurm.cpus_per_task == 7
    assert lumi.slurm.cpu_bind is not None and lumi.slurm.cpu_bind.startswith("mask_cpu:")
    assert len(lumi.slurm.cpu_bind.split(":", 1)[1].split(",")) == 8  # one mask per GCD
    assert lumi.apptainer.bind_host_rocm is False
    assert {b.source for b in lumi.container.binds} == {
        "/opt/cray", "/var/spool/slurmd", "/usr/lib64/libcxi.so.1",
        # the file systems, whole: project directories are symlinks into /pfs
        "/pfs", "/scratch", "/projappl", "/project", "/flash", "/appl"}
    # masks bind correctly only on whole nodes
    assert lumi.slurm.exclusive is True
    env = site_env(lumi)
    # the image's plugin, and libfabric pinned to the CXI provider: no plugin over TCP
    assert lumi.network.plugin == "image" and env["FI_PROVIDER"] == "cxi"
    assert env["CXI_FORK_SAFE"] == env["CXI_FORK_SAFE_HP"] == "1"
    assert env["FI_CXI_DISABLE_CQ_HUGETLB"] == "1" and "NCCL_NET_GDR_LEVEL" not in env
    # the GDR level by ROCm release: ROCm 6 images only (it hangs ROCm 7.0 ones)
    assert site_env(lumi, rocm="6.4.4")["NCCL_NET_GDR_LEVEL"] == "3"
    assert "NCCL_NET_GDR_LEVEL" not in site_env(lumi, rocm="7.0.2")
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "hsn0,hsn1,hsn2,hsn3"
    assert loader_dir(lumi) == "/opt/cray/libfabric/*/lib64"  # the newest the node has

    beverin = load_site("cscs-beverin")
    assert beverin.network.provider == "cxi" and beverin.slurm.gpus_per_node == 4
    assert site_binds(beverin) == ()  # the Container Engine's CXI hook binds libfabric
    assert loader_dir(beverin) is None  # ...in place of the image's
    env = site_env(beverin)
    assert env["NCCL_NET"] == "AWS Libfabric"
    assert beverin.network.plugin == "image" and env["FI_PROVIDER"] == "cxi"
    assert env["CXI_FORK_SAFE"] == env["CXI_FORK_SAFE_HP"] == "1"
    # MIOpen's database and cache node-local, without SQLite's write-ahead log
    assert env["MIOPEN_USER_DB_PATH"] == env["MIOPEN_CUSTOM_CACHE_DIR"] == "/tmp/${USER}-miopen-cache"
    assert env["MIOPEN_DEBUG_DISABLE_SQL_WAL"] == "1"
    # one rank per APU (socket), dealt round robin
    assert beverin.slurm.distribution == "block:cyclic" and beverin.slurm.exclusive is None


def test_the_network_plugin_choice_sets_what_rccl_needs() -> None:
    def env(network: str) -> dict[str, str]:
        return site_env(parse_site(f"name: s\nnetwork: {network}\n".encode(), "sites/s.yaml"))

    # Slingshot: the image's plugin, pinned to the site's provider
    assert env("{provider: cxi}") == {"FI_PROVIDER": "cxi"}  # image is the default
    assert env("{provider: cxi, plugin: image}") == {"FI_PROVIDER": "cxi"}
    # InfiniBand/RoCE: RCCL's own IB verbs transport, whatever plugin the image carries
    assert env("{plugin: none}") == {"NCCL_NET": "IB"}
    # the site's hook brings its plugin (the EDF handles it): nothing for other runtimes
    assert env("{provider: cxi, plugin: site}") == {}
    # a profile's own value wins over the derived one
    site = parse_site(b"name: s\nnetwork: {provider: cxi}\ncontainer: {env: {FI_PROVIDER: 'cxi,shm'}}\n",
                      "sites/s.yaml")
    assert site_env(site)["FI_PROVIDER"] == "cxi,shm"


BAD = """\
name: bad
container:
  binds: ["/opt/cray:/opt/cray:rx", "relative/path", "/a b"]
  env:
    LD_LIBRARY_PATH: "/opt/x"
    GOOD: "1"
    COUNT: 3
    EVIL: "$(reboot)"
network:
  socket_ifname: "hsn0 hsn1"
  provider: CXI!
  colour: blue
  plugin: libfabric
slurm:
  gpus_per_node: 0
  cpus_per_task: true
  cpu_bind: "mask_cpu:zz"
  gpu_select: nearest
  distribution: "round:robin"
  exclusive: "yes"
apptainer:
  bind_host_rocm: "yes"
libfabric:
  provided_by: site
  version: "1.22.0"
  library_dir: /opt/elsewhere/lib64
"""


def test_every_problem_is_reported_with_line_and_key_path() -> None:
    with pytest.raises(SiteProfileError) as caught:
        parse_site(BAD.encode(), "sites/bad.yaml")
    lines = str(caught.value).splitlines()

    def has(prefix: str) -> bool:
        return any(line.startswith(prefix) for line in lines)

    assert has("sites/bad.yaml:3: container.binds: '/opt/cray:/opt/cray:rx': expected SRC[:DST[:ro]]")
    assert has("sites/bad.yaml:3: container.binds: 'relative/path': 'relative/path' is not an "
               "absolute path")
    assert has("sites/bad.yaml:5: container.env.LD_LIBRARY_PATH: set by the image or the "
               "launcher, not by a site profile (the site's libfabric directory: "
               "libfabric.library_dir)")
    assert has("sites/bad.yaml:7: container.env.COUNT: expected a string")
    assert has("sites/bad.yaml:8: container.env.EVIL: one line, no command substitution")
    assert has("sites/bad.yaml:10: network.socket_ifname: expected interface names")
    assert has("sites/bad.yaml:11: network.provider: expected a libfabric provider name")
    assert has("sites/bad.yaml:12: network.colour: unknown key")
    assert has("sites/bad.yaml:13: network.plugin: expected one of image, site, none")
    assert has("sites/bad.yaml:15: slurm.gpus_per_node: expected an integer >= 1, got 0")
    assert has("sites/bad.yaml:16: slurm.cpus_per_task: expected an integer >= 1, got True")
    assert has("sites/bad.yaml:17: slurm.cpu_bind: expected cores")
    assert has("sites/bad.yaml:18: slurm.gpu_select: expected one of local-id, closest")
    assert has("sites/bad.yaml:19: slurm.distribution: expected srun --distribution values")
    assert has("sites/bad.yaml:20: slurm.exclusive: expected true or false")
    assert has("sites/bad.yaml:22: apptainer.bind_host_rocm: expected true or false")
    # A library directory nothing binds into the container cannot be on its loader path.
    assert has("sites/bad.yaml:26: libfabric.library_dir: /opt/elsewhere/lib64 is not inside "
               "any container.binds (or edf.mounts) target")
    assert not any("GOOD" in line for line in lines)


def test_absent_sections_mean_no_values() -> None:
    site = parse_site(b"name: plain\n", "sites/plain.yaml")
    assert site.container.binds == () and site.container.env == ()
    assert site.network.provider is None and site.slurm.cpu_bind is None
    assert site_env(site) == {} and loader_dir(site) is None


def test_bind_grammar() -> None:
    assert parse_bind("/opt/cray") == Bind("/opt/cray", "/opt/cray", read_only=False)
    assert parse_bind("/opt/cray:/host/cray:ro") == Bind("/opt/cray", "/host/cray", read_only=True)
    assert parse_bind("${SCRATCH}/data:/data").expands  # type: ignore[union-attr]
    assert Bind("/a", "/b", read_only=True).spec() == "/a:/b:ro"
    for bad in ("/a:/b:ro:x", "/a,/b", "a", "/a:/b:noexec", "/$(x)"):
        assert isinstance(parse_bind(bad), str), bad


def test_project_site_with_launch_sections(tmp_path: Path) -> None:
    (tmp_path / "sites").mkdir()
    (tmp_path / "sites" / "mine.yaml").write_text(
        "name: mine\nslurm: {cpu_bind: 'mask_cpu:0x3,0xc', gpus_per_node: 2}\n"
        "network: {provider: tcp}\n")
    site = load_site("mine", tmp_path)
    assert site.slurm.cpu_bind == "mask_cpu:0x3,0xc" and site.slurm.gpus_per_node == 2
    assert site.network.provider == "tcp"
