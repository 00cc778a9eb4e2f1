"""A site profile that extends another: the shipped own-stack Beverin profile, and the
merge's rules and refusals on project profiles."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.errors import SiteProfileError
from imagebuild.recipe.site import load_site

ROOT = Path(__file__).resolve().parents[2]


def test_the_own_stack_beverin_profile_is_beverin_with_the_hook_off() -> None:
    beverin, own = load_site("cscs-beverin", ROOT), load_site("cscs-beverin-own-stack", ROOT)
    assert own.libfabric is not None and beverin.libfabric is not None
    assert (own.libfabric.provided_by, own.libfabric.version) == ("image", None)
    assert (beverin.libfabric.provided_by, beverin.libfabric.version) == ("site", "1.22.0")
    assert dict(own.annotations)["com.hooks.cxi.enabled"] == "false"
    assert dict(beverin.annotations)["com.hooks.cxi.enabled"] == "true"
    env, base_env = dict(own.container.env), dict(beverin.container.env)
    assert env["FI_CXI_RX_MATCH_MODE"] == "hybrid" and base_env["FI_CXI_RX_MATCH_MODE"] == "software"
    assert env["NCCL_CROSS_NIC"] == "0" and env["FI_CXI_DEFAULT_TX_SIZE"] == "16384"
    # The rest is Beverin's.
    assert env["NCCL_PROTO"] == base_env["NCCL_PROTO"]
    assert (own.slurm, own.mounts, own.network, own.gpu_targets) == (
        beverin.slurm, beverin.mounts, beverin.network, beverin.gpu_targets)
    assert own.name == "cscs-beverin-own-stack" and own.sha256 != beverin.sha256


def write(sites: Path, name: str, text: str) -> None:
    sites.mkdir(exist_ok=True)
    (sites / f"{name}.yaml").write_text(text)


def test_a_null_removes_what_the_extended_profile_set(tmp_path: Path) -> None:
    write(tmp_path / "sites", "base", "name: base\ncontainer:\n  env:\n    A: '1'\n    B: '2'\n"
          "slurm:\n  gpus_per_node: 8\n")
    write(tmp_path / "sites", "child", "extends: base\nname: child\ncontainer:\n  env:\n"
          "    B: null\n    C: '3'\n")
    child = load_site("child", tmp_path)
    assert dict(child.container.env) == {"A": "1", "C": "3"}
    assert child.slurm.gpus_per_node == 8


@pytest.mark.parametrize("extends, message", [
    ("nowhere", "extends: --site: no site profile 'nowhere'"),
    ("loop", "in a cycle: loop -> child -> loop"),
])
def test_a_broken_chain_is_refused_at_the_extends_line(tmp_path: Path, extends: str,
                                                       message: str) -> None:
    write(tmp_path / "sites", "loop", "name: loop\nextends: child\n")
    write(tmp_path / "sites", "child", f"name: child\nextends: {extends}\n")
    with pytest.raises(SiteProfileError) as raised:
        load_site("loop" if extends == "loop" else "child", tmp_path)
    text = str(raised.value)
    assert message in text, text
    assert ":2: extends" in text or ":2:" in text, text
