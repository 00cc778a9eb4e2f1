"""The plugin carrying RCCL over TCP: the image's plugin in use with nothing that gives it
a fabric (no FI_PROVIDER pin, no NCCL_NET=IB, no host libfabric) is named, with the site
profile that fixes it, on MI300X- and LUMI-shaped trees."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from imagebuild.doctor.site_settings import doctor_settings, inside_image
from imagebuild.inimage.doctor import libfabric
from imagebuild.inimage.doctor.finding import PASS, SKIP, WARN, Finding
from imagebuild.inimage.doctor.libfabric import pinned_provider
from imagebuild.inimage.doctor.needs import needs_from_manifest
from imagebuild.recipe.site import load_site
from tests.inimage.doctor.conftest import NodeCase, build_case


def _libfabric(case: NodeCase, site: str | None = None, **env: str) -> Finding:
    settings = doctor_settings(load_site(site) if site else None, {**case.env, **env},
                               case.root)
    if case.in_image:
        settings = inside_image(settings)
    return libfabric.check(case.root, needs_from_manifest(case.manifest), settings.fabric,
                           settings.env)


def test_no_site_on_mi300x_names_the_profile_not_a_library_dir(tmp_path: Path) -> None:
    case = build_case("plugin-over-tcp-mi300x", tmp_path)
    finding = _libfabric(case)
    assert finding.status == WARN and "carries RCCL over TCP" in finding.reason
    assert "--site mi300x-ib" in finding.fix and "library_dir" not in finding.fix
    assert _libfabric(case, site="mi300x-ib").status == SKIP  # NCCL_NET=IB: RCCL's own IB


def test_inside_the_image_its_own_libfabric_is_tcp(tmp_path: Path) -> None:
    case = build_case("plugin-over-tcp-in-image-mi300x", tmp_path)
    finding = _libfabric(case)
    assert finding.status == WARN, finding
    assert "/opt/libfabric/lib/libfabric.so.1" in finding.reason and "TCP" in finding.reason
    assert _libfabric(case, FI_PROVIDER="cxi").status == PASS  # pinned: fails, never TCP
    # The same library bound from the host (a mount of its own) is the host's.
    mountinfo = case.root / "proc/self/mountinfo"
    mountinfo.write_text(mountinfo.read_text() + "40 22 0:40 /libfabric /opt/libfabric ro,"
                         "relatime - ext4 /dev/sda1 rw\n")
    assert _libfabric(replace(case)).status == PASS


def test_a_socket_provider_pin_is_tcp(tmp_path: Path) -> None:
    case = build_case("fi-provider-tcp-lumi", tmp_path)
    finding = _libfabric(case)
    assert finding.status == WARN and "tcp provider, not the fabric" in finding.reason
    assert _libfabric(case, site="lumi").status == PASS  # the profile pins cxi


def test_pinned_provider() -> None:
    assert pinned_provider({"FI_PROVIDER": "tcp;ofi_rxm"}) == "tcp"
    assert pinned_provider({"FI_PROVIDER": "CXI,tcp"}) == "cxi"
    assert pinned_provider({"FI_PROVIDER": "^verbs"}) is None
    assert pinned_provider({}) is None
