"""The hipBLASLt kernels check on a real hipBLASLt: Debian experimental's libhipblaslt1
7.2.4 (7.2.4+dfsg-1~exp1), installed in the debootstrapped sid base the plugin test uses.

Debian builds it for gfx908, gfx90a, gfx1100, gfx1101, gfx1102, gfx1151, gfx1200 and gfx1201
(the package's X-Rocm-Gpu-Architecture field), not gfx942: 1,287 files, 844 MB under
/usr/lib/x86_64-linux-gnu/hipblaslt/library, per target a TensileLibrary_lazy_<target>.dat
index, TensileLibrary_*_<target>.co/.dat pairs, Kernels.so-000-<target>.hsaco and
extop_<target>.co. The check (render/templates/hipblaslt-check.py kernels, which the final
stage of a hipBLASLt build runs with the recipe's gpu_targets) must refuse this library for
gfx942, naming what it carries, and accept it for gfx90a. It reads where the library itself
looks: hipblaslt/library beside libhipblaslt.so.1, or HIPBLASLT_TENSILE_LIBPATH.

Cost, measured on a 2-core machine: 59 s for the file (apt fetches the 257 MB .deb and the
HIP runtime it depends on, then unpacks 844 MB; measured beside another docker build), of
which the checks take under a second; nothing is built, and no image is kept.
"""

from __future__ import annotations

import subprocess

import pytest

from imagebuild.render.dockerfile import TEMPLATES
from testbed import base_images
from testbed.plugin_recipe import SID_ROCM_7_2_4

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

HIPBLASLT = "libhipblaslt1=7.2.4+dfsg-1~exp1"
#: libhipblaslt1 depends on libamdhip64-7; apt's solver takes the candidate (sid's) of a
#: dependency unless it is named with its experimental version (testbed/plugin_recipe.py).
RUNTIME = tuple(p for p in SID_ROCM_7_2_4.runtime_packages
                if p.split("=")[0] in ("libamdhip64-7", "libhsa-runtime64-1", "libamd-comgr3"))
SCRIPT = r"""
set -e
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" \
    python3-minimal > /tmp/apt.log || { tail -20 /tmp/apt.log; exit 3; }
echo "kernels: $(ls /usr/lib/x86_64-linux-gnu/hipblaslt/library | wc -l) files," \
    "$(du -sm /usr/lib/x86_64-linux-gnu/hipblaslt | cut -f1) MB"
check() { python3 /check/hipblaslt-check.py kernels /usr/lib/x86_64-linux-gnu --targets "$1" \
    2>&1 && echo "rc=0" || echo "rc=$?"; }
echo "== gfx942"; check gfx942
echo "== gfx90a"; check gfx90a
echo "== gfx90a:xnack+,gfx1100"; check gfx90a:xnack+,gfx1100
mkdir /tmp/elsewhere
ln -s /usr/lib/x86_64-linux-gnu/hipblaslt/library/*gfx908* /tmp/elsewhere/
echo "== libpath"; HIPBLASLT_TENSILE_LIBPATH=/tmp/elsewhere check gfx908,gfx90a
"""


@pytest.fixture(scope="module")
def checked(docker_engine) -> dict[str, str]:
    image = base_images.import_base_image_docker(docker_engine, base_images.SID_EXPERIMENTAL)
    ran = subprocess.run(
        ["docker", "run", "--rm", "--network", "host", "-v", f"{TEMPLATES}:/check:ro", image,
         "bash", "-c", SCRIPT, "install", HIPBLASLT, *RUNTIME],
        capture_output=True, text=True, timeout=900, check=False)
    assert ran.returncode == 0, (ran.stdout[-3000:], ran.stderr[-3000:])
    print("\n" + ran.stdout)
    sections = ran.stdout.split("== ")
    return {"install": sections[0], **{s.split("\n", 1)[0]: s.split("\n", 1)[1]
                                       for s in sections[1:]}}


def test_the_real_library_is_refused_for_gfx942(checked: dict[str, str]) -> None:
    out = checked["gfx942"]
    assert out.rstrip().endswith("rc=1")
    assert ("/usr/lib/x86_64-linux-gnu/libhipblaslt.so.1 has no kernels for gfx942 (no "
            "TensileLibrary_lazy_gfx942.dat, 0 code objects) in "
            "/usr/lib/x86_64-linux-gnu/hipblaslt/library, which carries gfx1100, gfx1101, "
            "gfx1102, gfx1151, gfx1200, gfx1201, gfx908, gfx90a") in out


def test_the_real_library_passes_for_the_targets_it_carries(checked: dict[str, str]) -> None:
    assert "kernels: 1287 files, 844 MB" in checked["install"]
    out = checked["gfx90a"]
    assert out.rstrip().endswith("rc=0")
    assert "finds kernels for gfx90a in /usr/lib/x86_64-linux-gnu/hipblaslt/library" in out
    # a feature suffix is the same kernels' target
    assert checked["gfx90a:xnack+,gfx1100"].rstrip().endswith("rc=0")


def test_hipblaslt_tensile_libpath_is_where_it_looks(checked: dict[str, str]) -> None:
    out = checked["libpath"]
    assert out.rstrip().endswith("rc=1")
    assert "has no kernels for gfx90a" in out and "in /tmp/elsewhere, which carries gfx908" in out
    assert "gfx908 (" not in out

