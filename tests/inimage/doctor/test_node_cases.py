"""The doctor on trees shaped like LUMI-G (MI250X), Beverin (MI300A) and MI300X nodes:
each failure is caught on the node shaped like the one that has it, with the status the
case names, and every other item passes (or does not apply); the healthy nodes pass."""

from __future__ import annotations

import pytest

from imagebuild.doctor.site_settings import doctor_settings, inside_image
from imagebuild.inimage.doctor.finding import FAIL, PASS, SKIP, exit_code
from imagebuild.inimage.doctor.needs import (
    DEVICE_CODE_FILE,
    needs_from_manifest,
    read_device_code,
    with_device_code,
)
from imagebuild.inimage.doctor.run import ITEMS, run_doctor
from imagebuild.recipe.site import load_site
from tests.inimage.doctor.conftest import CASES, NodeCase


def doctor(case: NodeCase) -> dict[str, tuple[str, str, str]]:
    site = load_site(case.site) if case.site else None
    settings = doctor_settings(site, case.env, case.root)
    if case.in_image:
        settings = inside_image(settings)
    needs = with_device_code(needs_from_manifest(case.manifest), read_device_code(
        case.root / "opt/imagebuild" / DEVICE_CODE_FILE))
    findings = run_doctor(needs, settings)
    assert [f.item for f in findings] == list(ITEMS)
    return {f.item: (f.status, f.reason, f.fix) for f in findings}


@pytest.mark.parametrize("name", CASES)
def test_case(name: str, node_cases: dict[str, NodeCase]) -> None:
    case = node_cases[name]
    result = doctor(case)
    fixes = " ".join(fix for _, _, fix in result.values())
    assert case.expect.get("fix_contains", "") in fixes
    for item, (status, reason, _) in result.items():
        wanted = case.expect.get(item)
        if wanted:
            assert status == wanted, f"{item}: {status} ({reason})"
        else:
            assert status in (PASS, SKIP), f"{item}: {status} ({reason})"


def test_a_failed_item_makes_the_exit_code_1(node_cases: dict[str, NodeCase]) -> None:
    from imagebuild.inimage.doctor.finding import Finding

    statuses = {name: [Finding(i, s, r, f) for i, (s, r, f) in doctor(node_cases[name]).items()]
                for name in ("healthy-lumi", "xnack-off-beverin")}
    assert exit_code(statuses["healthy-lumi"]) == 0
    assert exit_code(statuses["xnack-off-beverin"]) == 1
    assert any(f.status == FAIL for f in statuses["xnack-off-beverin"])
