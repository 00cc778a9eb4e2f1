"""The hipBLASLt kernels check on a real hipBLASLt: Debian experimental's libhipblaslt1
7.2.4 (7.2.4+dfsg-1~exp1), installed in the debootstrapped sid base the plugin test uses.

Debian builds it for gfx908, gfx90a, gfx1100, gfx1101, gfx1102, gfx1151, gfx1200 and gfx1201
(the package's X-Rocm-Gpu-Architecture field), not gfx942: 1,287 files, 844 MB under
/usr/lib/x86_64-linux-gnu/hipblaslt/library, per target a TensileLibrary_lazy_<target>.dat
index, TensileLibrary_*_<target>.co/.dat pairs, Kernels.so-000-<target>.hsaco and
extop_<target>.co. The check (components/hipblaslt/check.py kernels, which the final
stage of a hipBLASLt build runs with the recipe's gpu_targets) must refuse this library for
gfx942, naming what it carries, and accept it for gfx90a. It reads where the library itself
looks: hipblaslt/library beside libhipblaslt.so.1, or HIPBLASLT_TENSILE_LIBPATH.

The same container installs Debian's real hipblaslt-bench (package libhipblaslt1-bench
7.2.4+dfsg-1~exp1: /usr/libexec/rocm/libhipblaslt1-bench/hipblaslt-bench, RUNPATH
$ORIGIN/../lib:$ORIGIN/../llvm/lib:..., as upstream's install sets it) and lays out what the
hipblaslt stage's `cmake --install --prefix /opt/hipblaslt` leaves, from these real files:
bin/hipblaslt-bench, lib/libhipblaslt.so* and lib/hipblaslt/ (the kernels, linked, not
copied). On that layout, with the real bench, run as the final stage runs them:
- `hipblaslt-bench --help`: the binary loads its real libraries without a GPU, and lists
  every flag that `imagebuild tune gemm` and the validate check pass it;
- hipblaslt-check.py final / link: "torch" is a package whose libtorch_hip.so (gcc) links
  the real libhipblaslt.so.1 and is dlopened at import, bundling its own copy of the real
  library as a wheel does. final fails on that copy, on Debian's own bench (it links
  /usr/lib's copy), and on an LD_LIBRARY_PATH that puts another copy first; after `link
  --into-torch` it passes and records one file;
- hipblaslt-tuning-kit.sh: the kit's bench (where find_exact.py runs it) is the installed
  one, and it links the library torch maps;
- `imagebuild tune gemm`'s bench lookup (the manifest rocm-7.2.4's final stage starts from)
  and its command line: the real bench parses it and stops only at the missing GPU ("Hip
  error: 'no ROCm-capable device is detected'"), where a misspelt option stops it with
  "Option --rotatin is not defined." (exit 255). The manifest's commit is the test lock's,
  not Debian's.

Cost, measured on a 2-core machine with a warm apt proxy: 28-32 s for the file, 23 s of it
apt (the 257 MB library .deb, the bench's 2.2 MB (16 MB installed), the HIP runtime and gcc;
844 MB of kernels unpacked); a cold fetch took 59 s before the bench was added. The checks
take a few seconds; nothing is built but the one-line stand-in, and no image is kept.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from imagebuild.components.hipblaslt.component import PREFIX as HIPBLASLT_PREFIX
from imagebuild.inimage.checks.hipblaslt import BENCH_ARGS
from imagebuild.inimage.tuning.bench import bench_argv
from imagebuild.recipe.load import load_recipe
from imagebuild.render.context import build_context
from imagebuild.render.manifest import manifest
from imagebuild.render.plan import plan_for
from testbed import base_images
from testbed.plugin_recipe import SID_ROCM_7_2_4
from tests.components.conftest import REPO
from tests.components.hipblaslt.test_kit import build_tree
from tests.support.render import write_lock

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

HIPBLASLT = ("libhipblaslt1=7.2.4+dfsg-1~exp1", "libhipblaslt1-bench=7.2.4+dfsg-1~exp1")
#: Where Debian's libhipblaslt1-bench installs the bench (not on PATH).
DEBIAN_BENCH = "/usr/libexec/rocm/libhipblaslt1-bench/hipblaslt-bench"
#: libhipblaslt1 and -bench depend on libamdhip64-7 and librocm-smi64-7; apt's solver takes
#: the candidate (sid's) of a dependency unless it is named with its experimental version
#: (testbed/plugin_recipe.py).
RUNTIME = tuple(p for p in SID_ROCM_7_2_4.runtime_packages
                if p.split("=")[0] in ("libamdhip64-7", "libhsa-runtime64-1", "libamd-comgr3",
                                       "librocm-smi64-7"))
#: The stand-in for torch's libtorch_hip.so: it needs a real symbol of the real library, so
#: the import fails unless the loader resolved that library.
TORCH_HIP_C = "extern int hipblasLtCreate(void *); void *imagebuild_uses = (void *) hipblasLtCreate;\n"
#: What `imagebuild tune gemm` does in the image before it measures: find the bench (the
#: manifest's, as the final image records it) and run it with the arguments of one problem.
TUNE_GEMM = """
import subprocess
from imagebuild.inimage.tuning.bench import bench_argv
from imagebuild.inimage.tuning.gemm_tuner import default_bench
bench = default_bench()
print("bench:", bench)
problem = dict(m="4096", n="4096", k="4096", transA="N", transB="T", batch_count="1",
               a_type="bf16_r", b_type="bf16_r", c_type="bf16_r", d_type="bf16_r",
               compute_type="f32_r")
for label, extra in (("tune", []), ("misspelt", ["--rotatin", "512"])):
    ran = subprocess.run(bench_argv(bench, problem, 10, 2, 512) + extra,
                         capture_output=True, text=True)
    print(f"{label} rc:", ran.returncode)
    print(ran.stdout[-1500:] + ran.stderr[-1500:])
"""
TORCH_INIT = ("import ctypes, os\n"
              "ctypes.CDLL(os.path.join(os.path.dirname(__file__), 'lib', 'libtorch_hip.so'))\n")
SCRIPT = r"""
set -e
apt-get update -qq
started=$(date +%s)
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" \
    python3 gcc libc6-dev > /tmp/apt.log || { tail -20 /tmp/apt.log; exit 3; }
echo "installed in $(( $(date +%s) - started )) s"
L=/usr/lib/x86_64-linux-gnu
echo "kernels: $(ls $L/hipblaslt/library | wc -l) files, $(du -sm $L/hipblaslt | cut -f1) MB"
echo "bench package: $(dpkg-query -W -f='${Installed-Size}' libhipblaslt1-bench) KiB," \
    "library: $(du -k $L/libhipblaslt.so.1.* | cut -f1) KiB"
check() { python3 /check/hipblaslt-check.py kernels $L --targets "$1" \
    2>&1 && echo "rc=0" || echo "rc=$?"; }
echo "== gfx942"; check gfx942
echo "== gfx90a"; check gfx90a
echo "== gfx90a:xnack+,gfx1100"; check gfx90a:xnack+,gfx1100
mkdir /tmp/elsewhere
ln -s $L/hipblaslt/library/*gfx908* /tmp/elsewhere/
echo "== libpath"; HIPBLASLT_TENSILE_LIBPATH=/tmp/elsewhere check gfx908,gfx90a
echo "== help"; "$BENCH" --help 2>&1 && echo "rc=0" || echo "rc=$?"

# What the hipblaslt stage's `cmake --install build/release --prefix $P` leaves, from the
# real files; the kernels linked rather than copied (844 MB).
P=$PREFIX
mkdir -p $P/bin $P/lib
cp -P $L/libhipblaslt.so.1 $L/libhipblaslt.so.1.* $P/lib/
ln -s libhipblaslt.so.1 $P/lib/libhipblaslt.so
ln -s $L/hipblaslt $P/lib/hipblaslt
cp "$BENCH" $P/bin/hipblaslt-bench
# "torch": libtorch_hip.so links the real library and finds it through RUNPATH $ORIGIN,
# where a wheel that bundles hipBLASLt keeps its own copy.
mkdir -p /site/torch/lib
cp /stand-in/__init__.py /site/torch/
cp $L/libhipblaslt.so.1.* /site/torch/lib/libhipblaslt.so.1
gcc -shared -fPIC -o /site/torch/lib/libtorch_hip.so /stand-in/torch_hip.c \
    -Wl,--no-as-needed $L/libhipblaslt.so.1 -Wl,-rpath,'$ORIGIN'
export PYTHONPATH=/site
cp /stand-in/manifest.json /tmp/manifest.json
final() { python3 /check/hipblaslt-check.py final $P/lib --manifest /tmp/manifest.json "$@" \
    2>&1 && echo "rc=0" || echo "rc=$?"; }
echo "== final bundled"; final --bench $P/bin/hipblaslt-bench --image-library-path $P/lib
echo "== link"; python3 /check/hipblaslt-check.py link $P/lib --into-torch 2>&1 \
    && echo "rc=0" || echo "rc=$?"
echo "== final"; final --bench $P/bin/hipblaslt-bench --image-library-path $P/lib --targets gfx90a
echo "== manifest"; cat /tmp/manifest.json
echo "== final debian bench"; final --bench "$BENCH" --image-library-path $P/lib
mkdir /tmp/copy && cp $L/libhipblaslt.so.1.* /tmp/copy/libhipblaslt.so.1
echo "== final other copy first"; final --bench $P/bin/hipblaslt-bench --image-library-path /tmp/copy
echo "== final gfx942"; final --bench $P/bin/hipblaslt-bench --targets gfx942
echo "== kit"; sh /check/hipblaslt-tuning-kit.sh "$SOURCE" $P 2>&1 && echo "rc=0" || echo "rc=$?"
kit_bench=$KIT_BUILD/clients/hipblaslt-bench
echo "== kit bench"; echo "resolves to $(readlink -f $kit_bench)"
"$kit_bench" --help > /tmp/kit-help.txt 2>&1 && echo "help rc=0" || echo "help rc=$?"
final --bench "$kit_bench" --image-library-path $P/lib
echo "== tune gemm"
IMAGEBUILD_MANIFEST=/tmp/manifest.json PYTHONPATH=/ib python3 -c "$TUNE_GEMM" 2>&1 \
    && echo "rc=0" || echo "rc=$?"
"""


@pytest.fixture(scope="module")
def checked(docker_engine, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    image = base_images.import_base_image_docker(docker_engine, base_images.SID_EXPERIMENTAL)
    work = tmp_path_factory.mktemp("hipblaslt-debian")
    stand_in = work / "stand-in"
    stand_in.mkdir()
    (stand_in / "torch_hip.c").write_text(TORCH_HIP_C)
    (stand_in / "__init__.py").write_text(TORCH_INIT)
    # The manifest the final stage of rocm-7.2.4 starts from (hipblaslt.bench, its ref).
    recipe = load_recipe("rocm-7.2.4", REPO)
    plan = plan_for(recipe, write_lock(recipe, work / "pylock.rocm-7.2.4.toml"))
    (stand_in / "manifest.json").write_text(json.dumps(manifest(plan)))
    # The check and the tuning kit's script as the build context stages them (/check).
    context = build_context(plan, work / "context")
    # A monorepo (7.x) source tree as install.sh -c leaves it (test_kit.py), at
    # the same path inside: its MatchTable.yaml names logic files by absolute path.
    source = build_tree(work / "tree", "monorepo")
    ran = subprocess.run(
        ["docker", "run", "--rm", "--network", "host", "-v", f"{context.directory}:/check:ro",
         "-v", f"{stand_in}:/stand-in:ro", "-v", f"{work / 'tree'}:{work / 'tree'}:ro",
         "-v", f"{REPO / 'imagebuild'}:/ib/imagebuild:ro", "-e", f"TUNE_GEMM={TUNE_GEMM}",
         "-e", f"BENCH={DEBIAN_BENCH}", "-e", f"PREFIX={HIPBLASLT_PREFIX}",
         "-e", f"SOURCE={source}", "-e", f"KIT_BUILD={HIPBLASLT_PREFIX}/tuning/build/release",
         image, "bash", "-c", SCRIPT, "install", *HIPBLASLT, *RUNTIME],
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



def test_the_real_bench_runs_and_takes_every_flag_imagebuild_passes(
        checked: dict[str, str]) -> None:
    """--help loads the bench with its real libraries (no GPU needed) and lists its options:
    every flag of `imagebuild tune gemm`'s command line and of the validate check's must be
    one of them (an unknown option stops the bench before it measures anything)."""
    out = checked["help"]
    assert out.rstrip().endswith("rc=0"), out[-2000:]
    listed = {word.strip(",") for line in out.splitlines() if line.startswith("-")
              for word in line.split("<", 1)[0].replace("|", " ").split() if word.startswith("-")}
    assert {"--rotating", "--algo_method", "--print_kernel_info", "--api_method"} <= listed
    problem = {"m": "8", "n": "8", "k": "8", "transA": "N", "transB": "T", "batch_count": "1",
               "a_type": "bf16_r", "b_type": "bf16_r", "c_type": "bf16_r", "d_type": "bf16_r",
               "compute_type": "f32_r"}
    passed = [a for a in [*bench_argv("bench", problem, 10, 2, 512)[1:], *BENCH_ARGS]
              if a.startswith("-") and not a.lstrip("-").isdigit()]
    assert sorted(set(passed) - listed) == []


def test_a_torch_bundling_its_own_copy_fails_until_linked(checked: dict[str, str]) -> None:
    prefix = HIPBLASLT_PREFIX
    out = checked["final bundled"]
    assert out.rstrip().endswith("rc=1"), out
    # The image's LD_LIBRARY_PATH outranks the stand-in's RUNPATH ($ORIGIN); without it
    # (a site that replaces LD_LIBRARY_PATH) torch loads its own copy.
    assert ("import torch maps /site/torch/lib/libhipblaslt.so.1 with the base image's "
            "environment (LD_LIBRARY_PATH unset), but hipblaslt-bench links "
            f"{prefix}/bin/../lib/libhipblaslt.so.1 (= {prefix}/lib/libhipblaslt.so.1.") in out
    assert checked["link"].rstrip().endswith("rc=0")
    assert "/site/torch/lib: libhipblaslt.so.1 replaced by links to " \
        f"{prefix}/lib" in checked["link"]
    out = checked["final"]
    assert out.rstrip().endswith("rc=0"), out
    assert "finds kernels for gfx90a" in out
    loaded = json.loads(checked["manifest"])["hipblaslt"]["loaded"]
    real = loaded["file"]
    assert real.startswith(f"{prefix}/lib/libhipblaslt.so.1.")
    assert loaded["bench_links"] == f"{prefix}/lib/libhipblaslt.so.1"
    # torch/lib's name is now a link: the process maps the installed file itself
    assert loaded["torch_maps"] == [real]
    assert len(loaded["checked"]) == 2


def test_a_bench_linking_another_copy_fails(checked: dict[str, str]) -> None:
    out = checked["final debian bench"]
    assert out.rstrip().endswith("rc=1"), out
    assert (f"{DEBIAN_BENCH} links /usr/lib/x86_64-linux-gnu/libhipblaslt.so.1 (= "
            "/usr/lib/x86_64-linux-gnu/libhipblaslt.so.1.") in out
    assert f"not the library installed in {HIPBLASLT_PREFIX}/lib" in out
    out = checked["final other copy first"]
    assert out.rstrip().endswith("rc=1"), out
    assert ("hipblaslt-bench links /tmp/copy/libhipblaslt.so.1 with the image's "
            "LD_LIBRARY_PATH=/tmp/copy") in out


def test_the_final_check_refuses_the_real_library_for_gfx942(checked: dict[str, str]) -> None:
    out = checked["final gfx942"]
    assert out.rstrip().endswith("rc=1") and "has no kernels for gfx942" in out


def test_the_tuning_kits_bench_is_the_installed_one_on_torchs_library(
        checked: dict[str, str]) -> None:
    assert checked["kit"].rstrip().endswith("rc=0"), checked["kit"]
    assert "kept hipblaslt-bench (build/release/clients/hipblaslt-bench)" in checked["kit"]
    out = checked["kit bench"]
    assert f"resolves to {HIPBLASLT_PREFIX}/bin/hipblaslt-bench" in out
    assert "help rc=0" in out
    # the bench find_exact.py runs links the one library torch maps
    assert out.rstrip().endswith("rc=0"), out
    assert f"hipblaslt-bench links {HIPBLASLT_PREFIX}/lib/libhipblaslt.so.1" in out


def test_tune_gemm_finds_the_manifests_bench_and_its_arguments_are_accepted(
        checked: dict[str, str]) -> None:
    """gemm_tuner's own lookup and command line, run in the container on the real bench:
    the manifest of rocm-7.2.4's final stage names /opt/hipblaslt/bin/hipblaslt-bench, and
    the bench takes every argument (it stops at the missing GPU, after parsing them); a
    misspelt option stops it before that, so the two are told apart."""
    out = checked["tune gemm"]
    assert out.rstrip().endswith("rc=0"), out
    assert f"bench: {HIPBLASLT_PREFIX}/bin/hipblaslt-bench" in out
    tune, misspelt = out.split("misspelt rc:", 1)
    assert "tune rc: 1" in tune and "no ROCm-capable device is detected" in tune
    assert "is not defined" not in tune
    assert misspelt.lstrip().startswith("255") and "Option --rotatin is not defined." in misspelt
