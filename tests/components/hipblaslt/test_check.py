"""hipblaslt-check.py, run for real on compiled libraries (gcc): two different
libhipblaslt.so builds, a hipblaslt-bench linked against one, and a "torch" package whose
import loads a libtorch_hip.so that NEEDs libhipblaslt, as the ROCm wheels' does.

The two layouts the recipes meet: a bundling wheel (torch/lib carries its own copy, found
through libtorch_hip's $ORIGIN RUNPATH) and a ".lw" wheel (libtorch_hip finds the system
ROCm's <rocm_prefix>/lib copy, which the base image's package put there). Before `link`
the check fails naming both files; after it, torch and the bench map one file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from imagebuild.components.hipblaslt import component as hipblaslt
from tests.support.scripts import staged

CHECK = staged(hipblaslt.CHECK, hipblaslt.FOLDER / "check.py")

def gcc(*args: str) -> None:
    subprocess.run(["gcc", *args], check=True, capture_output=True, text=True, timeout=120)


def hipblaslt(directory: Path, version: str, ident: int) -> Path:
    """libhipblaslt.so.<version> (soname libhipblaslt.so.0), its links and a kernel dir."""
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / f"hipblaslt-{ident}.c"
    source.write_text(f"int hipblaslt_id(void) {{ return {ident}; }}\n")
    real = directory / f"libhipblaslt.so.{version}"
    gcc("-shared", "-fPIC", "-Wl,-soname,libhipblaslt.so.0", "-o", str(real), str(source))
    source.unlink()
    (directory / "libhipblaslt.so.0").symlink_to(real.name)
    (directory / "libhipblaslt.so").symlink_to("libhipblaslt.so.0")
    kernels = directory / "hipblaslt" / "library"
    kernels.mkdir(parents=True)
    (kernels / "TensileLibrary.dat").write_text(f"kernels {ident}\n")
    return real


@dataclass
class Image:
    root: Path
    prefix: Path
    built: Path
    site: Path
    torch_lib: Path
    manifest: Path

    @property
    def library_dir(self) -> Path:
        return self.prefix / "lib"

    @property
    def bench(self) -> Path:
        return self.prefix / "bin" / "hipblaslt-bench"

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        environment = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        environment.update(PYTHONPATH=str(self.site), **env)
        return subprocess.run([sys.executable, str(CHECK), *args], check=False,
                              capture_output=True, text=True, env=environment, timeout=120)

    def final(self) -> subprocess.CompletedProcess:
        return self.run("final", str(self.library_dir), "--bench", str(self.bench),
                        "--manifest", str(self.manifest))


def make_image(root: Path, torch_runpath: str | None, bundled: bool,
               loads_hipblaslt: bool = True) -> Image:
    """/opt/hipblaslt built from source with its bench, and a venv-like site with torch."""
    prefix = root / "opt" / "hipblaslt"
    built = hipblaslt(prefix / "lib", "0.12.1", 1)
    main = root / "bench.c"
    main.write_text("int hipblaslt_id(void);\nint main(void) { return hipblaslt_id() - 1; }\n")
    (prefix / "bin").mkdir()
    gcc("-o", str(prefix / "bin" / "hipblaslt-bench"), str(main), f"-L{prefix / 'lib'}",
        "-lhipblaslt", "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../lib")
    site = root / "venv" / "site-packages"
    torch_lib = site / "torch" / "lib"
    torch_lib.mkdir(parents=True)
    if bundled:
        # The wheel's own copy: another build of the same soname.
        hipblaslt(torch_lib, "0.12.0", 2)
    if loads_hipblaslt:
        hip = root / "torch_hip.c"
        hip.write_text("int hipblaslt_id(void);\nint torch_hip(void) { return hipblaslt_id(); }\n")
        link_dir = torch_lib if bundled else Path(torch_runpath or "")
        gcc("-shared", "-fPIC", "-o", str(torch_lib / "libtorch_hip.so"), str(hip),
            f"-L{link_dir}", "-lhipblaslt", f"-Wl,--enable-new-dtags,-rpath,{torch_runpath}")
        init = ("import ctypes, os\n"
                "_hip = ctypes.CDLL(os.path.join(os.path.dirname(__file__), 'lib', "
                "'libtorch_hip.so'), mode=ctypes.RTLD_GLOBAL)\n"
                "__version__ = '2.8.0+rocm6.4.4.gitc1404424'\n")
    else:
        init = "__version__ = '2.8.0+cpu'\n"
    (site / "torch" / "__init__.py").write_text(init)
    manifest = root / "manifest.json"
    manifest.write_text(json.dumps({"recipe": "test", "hipblaslt": {
        "enabled": True, "commit": "a" * 40, "ref": "rocm-6.4.4", "loaded": None}}))
    return Image(root, prefix, built, site, torch_lib, manifest)


@pytest.fixture
def bundled(tmp_path: Path) -> Image:
    return make_image(tmp_path, "$ORIGIN", bundled=True)


@pytest.fixture
def system(tmp_path: Path) -> tuple[Image, Path]:
    """A ".lw" wheel: libtorch_hip finds <rocm>/lib, where the base image packaged one."""
    rocm_lib = tmp_path / "opt" / "rocm-6.4.4" / "lib"
    hipblaslt(rocm_lib, "0.12.0", 3)
    (rocm_lib / "libamdhip64.so").write_text("not hipblaslt\n")
    (tmp_path / "opt" / "rocm").symlink_to("rocm-6.4.4")
    return make_image(tmp_path, str(tmp_path / "opt" / "rocm" / "lib"), bundled=False), \
        tmp_path / "opt" / "rocm" / "lib"


def loaded(image: Image) -> dict:
    return json.loads(image.manifest.read_text())["hipblaslt"]["loaded"]


def test_a_bundled_copy_fails_the_build_naming_both_files(bundled: Image):
    result = bundled.final()
    assert result.returncode == 1
    message = result.stderr
    assert message.count("\n") == 1 and message.startswith("hipblaslt-check: ")
    assert f"import torch maps {bundled.torch_lib / 'libhipblaslt.so.0.12.0'}, " in message
    assert f"hipblaslt-bench links {bundled.prefix}/bin/../lib/libhipblaslt.so.0 " \
        f"(= {bundled.built})" in message
    assert "hipblaslt-check.py link" in message  # the hint
    assert loaded(bundled) is None


def test_torch_linked_to_the_built_library_passes_and_is_recorded(bundled: Image):
    result = bundled.run("link", str(bundled.library_dir), "--into-torch")
    assert result.returncode == 0, result.stderr
    assert "libhipblaslt.so, libhipblaslt.so.0, libhipblaslt.so.0.12.0 and hipblaslt/ " \
        "replaced" in result.stdout
    lib = bundled.torch_lib
    names = sorted(p.name for p in lib.iterdir() if p.name.startswith("libhipblaslt"))
    assert names == ["libhipblaslt.so", "libhipblaslt.so.0", "libhipblaslt.so.0.12.0",
                     "libhipblaslt.so.0.12.1"]
    assert all((lib / n).is_symlink() for n in names)
    assert {(lib / n).resolve() for n in names} == {bundled.built}
    assert os.readlink(lib / "hipblaslt") == str(bundled.library_dir / "hipblaslt")
    assert (lib / "hipblaslt" / "library" / "TensileLibrary.dat").read_text() == "kernels 1\n"

    result = bundled.final()
    assert result.returncode == 0, result.stderr
    record = loaded(bundled)
    assert record["file"] == str(bundled.built)
    assert [Path(p).resolve() for p in record["torch_maps"]] == [bundled.built]
    assert Path(record["bench_links"]).resolve() == bundled.built
    assert (record["commit"], record["ref"]) == ("a" * 40, "rocm-6.4.4")
    assert "one file" in result.stdout


def test_a_system_rocm_copy_fails_then_is_replaced_by_links(system: tuple[Image, Path]):
    image, rocm_lib = system
    result = image.final()
    assert result.returncode == 1
    assert str(rocm_lib.resolve() / "libhipblaslt.so.0.12.0") in result.stderr

    result = image.run("link", str(image.library_dir), "--into", str(rocm_lib))
    assert result.returncode == 0, result.stderr
    real = [p for p in rocm_lib.iterdir() if p.name.startswith("libhipblaslt")
            and not p.is_symlink()]
    assert real == []  # the packaged library is gone: exactly one libhipblaslt file
    assert (rocm_lib / "libhipblaslt.so.0").resolve() == image.built
    assert (rocm_lib / "hipblaslt").is_symlink()
    assert (rocm_lib / "libamdhip64.so").read_text() == "not hipblaslt\n"  # untouched
    result = image.final()
    assert result.returncode == 0, result.stderr
    assert loaded(image)["file"] == str(image.built)


def test_link_is_idempotent(system: tuple[Image, Path]):
    image, rocm_lib = system
    for _ in range(2):
        result = image.run("link", str(image.library_dir), "--into", str(rocm_lib))
        assert result.returncode == 0, result.stderr
    assert image.final().returncode == 0


def test_link_into_torch_refuses_a_wheel_that_bundles_nothing(system: tuple[Image, Path]):
    image, _ = system
    result = image.run("link", str(image.library_dir), "--into-torch")
    assert result.returncode == 1
    assert "holds no libhipblaslt" in result.stderr and ".lw" in result.stderr


def test_link_refuses_the_built_librarys_own_directory(bundled: Image):
    result = bundled.run("link", str(bundled.library_dir), "--into", str(bundled.library_dir))
    assert result.returncode == 1
    assert bundled.built.is_file()


def test_a_torch_that_maps_no_hipblaslt_fails(tmp_path: Path):
    image = make_image(tmp_path, None, bundled=False, loads_hipblaslt=False)
    result = image.final()
    assert result.returncode == 1
    assert "import torch mapped no libhipblaslt" in result.stderr


def test_a_failing_import_is_named(bundled: Image):
    (bundled.site / "torch" / "__init__.py").write_text("raise ImportError('no HIP runtime')\n")
    result = bundled.final()
    assert result.returncode == 1
    assert "import torch failed: ImportError: no HIP runtime" in result.stderr


def test_a_bench_that_does_not_resolve_its_library_fails(bundled: Image):
    (bundled.library_dir / "libhipblaslt.so.0").unlink()  # the soname the bench needs
    (bundled.library_dir / "libhipblaslt.so").unlink()
    (bundled.library_dir / "libhipblaslt.so").symlink_to(bundled.built.name)
    result = bundled.final()
    assert result.returncode == 1
    assert "hipblaslt-bench needs libhipblaslt.so.0, which the loader does not find" \
        in result.stderr


def test_a_bench_linking_another_library_fails(bundled: Image):
    other = bundled.root / "other"
    hipblaslt(other, "0.12.1", 4)
    result = bundled.run("final", str(bundled.library_dir), "--bench", str(bundled.bench),
                         "--manifest", str(bundled.manifest), LD_LIBRARY_PATH=str(other))
    assert result.returncode == 1
    assert f"links {other / 'libhipblaslt.so.0'}" in result.stderr
    assert f"not the library installed in {bundled.library_dir}" in result.stderr


def test_the_images_ld_library_path_alone_is_not_enough(system: tuple[Image, Path]):
    """The image's LD_LIBRARY_PATH puts the built library first, so torch maps it; a site
    that replaces LD_LIBRARY_PATH would map the base image's copy: both are checked."""
    image, rocm_lib = system
    args = ("final", str(image.library_dir), "--bench", str(image.bench),
            "--manifest", str(image.manifest), "--image-library-path", str(image.library_dir))
    result = image.run(*args)
    assert result.returncode == 1
    assert f"{rocm_lib.resolve()}/libhipblaslt.so.0.12.0 with the base image's environment " \
        "(LD_LIBRARY_PATH unset)" in result.stderr
    assert image.run("link", str(image.library_dir), "--into", str(rocm_lib)).returncode == 0
    result = image.run(*args, LD_LIBRARY_PATH="/nonexistent")
    assert result.returncode == 0, result.stderr
    assert loaded(image)["checked"] == [
        f"with the image's LD_LIBRARY_PATH={image.library_dir}:/nonexistent",
        "with the base image's environment (LD_LIBRARY_PATH=/nonexistent)"]


# hipBLASLt 1.1 installs its library and bench with RUNPATH $ORIGIN/../llvm/lib (libomp
# comes from ROCm's LLVM); under the recipes' prefix that directory does not exist.
def rebuild_with_llvm_runpath(image: Image, rocm: Path) -> Path:
    """The built libhipblaslt again, now NEEDing libomp.so through $ORIGIN/../llvm/lib,
    and a libomp.so in ROCm's llvm/lib, as a hipBLASLt 1.1 install lays them out."""
    llvm_lib = rocm / "llvm" / "lib"
    llvm_lib.mkdir(parents=True)
    omp = image.root / "omp.c"
    omp.write_text("int omp_get_max_threads(void) { return 1; }\n")
    gcc("-shared", "-fPIC", "-Wl,-soname,libomp.so", "-o", str(llvm_lib / "libomp.so"), str(omp))
    source = image.root / "hipblaslt-omp.c"
    source.write_text("int omp_get_max_threads(void);\n"
                      "int hipblaslt_id(void) { return omp_get_max_threads(); }\n")
    gcc("-shared", "-fPIC", "-Wl,-soname,libhipblaslt.so.0", "-o", str(image.built),
        str(source), f"-L{llvm_lib}", "-lomp",
        "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../llvm/lib")
    runpath = subprocess.run(["readelf", "-d", str(image.built)], capture_output=True,
                             text=True, check=True).stdout
    assert "[$ORIGIN/../llvm/lib]" in runpath
    return llvm_lib


def stage_llvm_link(root: Path) -> None:
    """The hipblaslt stage's own command (rendered for rocm-7.1.1, hipBLASLt 1.1) that
    makes <prefix>/llvm resolve, run with / moved to ROOT."""
    from imagebuild.recipe.load import load_recipe
    from imagebuild.render.dockerfile import render_dockerfile
    from tests.components.conftest import REPO
    from tests.support.render import committed_plan

    text = render_dockerfile(committed_plan(load_recipe("rocm-7.1.1", REPO)))
    match = re.search(r"if \[ ! -e /opt/hipblaslt/llvm \]; then ln -s \S+ \S+; fi", text)
    assert match, "the hipblaslt stage does not link <prefix>/llvm"
    command = match.group(0).replace(" /opt/", f" {root}/opt/")
    subprocess.run(["sh", "-c", command], check=True)


def test_a_library_with_the_llvm_runpath_fails_until_the_stage_links_llvm(
        system: tuple[Image, Path]):
    image, rocm_lib = system
    rocm = rocm_lib.parent
    rebuild_with_llvm_runpath(image, rocm.resolve())
    assert image.run("link", str(image.library_dir), "--into", str(rocm_lib)).returncode == 0
    # torch finds the library through <rocm>/lib, where ../llvm/lib exists; the bench does
    # not: the check fails, naming the library the loader cannot find.
    result = image.final()
    assert result.returncode == 1
    assert "libomp.so => not found" in result.stderr

    stage_llvm_link(image.root)
    assert (image.prefix / "llvm").resolve() == (rocm / "llvm").resolve()
    result = image.final()
    assert result.returncode == 0, result.stderr
    assert loaded(image)["file"] == str(image.built)
    trace = subprocess.run([str(image.bench)], env={"LD_TRACE_LOADED_OBJECTS": "1"},
                           capture_output=True, text=True, check=True).stdout
    assert f"{image.prefix}/bin/../lib/../llvm/lib/libomp.so" in trace


def test_a_bundling_torch_linked_to_a_11_library_still_fails_named(bundled: Image):
    """torch/lib's links are loaded by that name: $ORIGIN is torch/lib, whose ../llvm/lib
    the prefix's link does not reach. No shipped recipe pairs a bundling wheel with
    hipBLASLt 1.1 (6.4.4's is 0.12); should one, the build stops here, naming libomp."""
    rocm = bundled.root / "opt" / "rocm"
    rebuild_with_llvm_runpath(bundled, rocm)
    stage_llvm_link(bundled.root)
    assert bundled.run("link", str(bundled.library_dir), "--into-torch").returncode == 0
    result = bundled.final()
    assert result.returncode == 1
    assert "libomp.so" in result.stderr


# --- kernels: every target has the device code the library will find ---------------------------
# tests/components/hipblaslt/test_debian.py runs the same check on Debian's real hipBLASLt 7.2.4.

def kernel_files(library: Path, *targets: str, index: bool = True) -> None:
    """Name the files a Tensile build writes for ``targets`` beside ``library``."""
    directory = library.parent / "hipblaslt" / "library"
    for target in targets:
        if index:
            (directory / f"TensileLibrary_lazy_{target}.dat").write_bytes(b"\x80")
        (directory / f"TensileLibrary_BB_BB_HA_Bias_{target}.co").write_bytes(b"\x7fELF")
        (directory / f"Kernels.so-000-{target}.hsaco").write_bytes(b"\x7fELF")


def test_kernels_pass_for_each_target_the_library_carries(bundled: Image):
    kernel_files(bundled.built, "gfx90a", "gfx942")
    result = bundled.run("kernels", str(bundled.library_dir), "--targets", "gfx942,gfx90a:xnack+")
    assert result.returncode == 0, result.stderr
    assert "gfx942: 2 code objects; gfx90a: 2 code objects; it carries gfx90a, gfx942" in \
        result.stdout


def test_kernels_fail_for_a_missing_target_naming_what_is_there(bundled: Image):
    kernel_files(bundled.built, "gfx90a", "gfx1100")
    kernel_files(bundled.built, "gfx942", index=False)
    result = bundled.run("kernels", str(bundled.library_dir), "--targets", "gfx942,gfx110")
    assert result.returncode == 1
    assert (f"has no kernels for gfx942 (no TensileLibrary_lazy_gfx942.dat, 2 code objects), "
            f"gfx110 (no TensileLibrary_lazy_gfx110.dat, 0 code objects) in "
            f"{bundled.library_dir / 'hipblaslt' / 'library'}, which carries gfx1100, gfx90a"
            ) in result.stderr


def test_final_with_targets_records_the_kernels(bundled: Image):
    bundled.run("link", str(bundled.library_dir), "--into-torch")
    kernel_files(bundled.built, "gfx942")
    result = bundled.run("final", str(bundled.library_dir), "--bench", str(bundled.bench),
                         "--manifest", str(bundled.manifest), "--targets", "gfx942")
    assert result.returncode == 0, result.stderr
    kernels = json.loads(bundled.manifest.read_text())["hipblaslt"]["kernels"]
    assert kernels["carries"] == ["gfx942"]
    assert kernels["targets"]["gfx942"] == {"index": ["TensileLibrary_lazy_gfx942.dat"],
                                            "code_objects": 2}
    failing = bundled.run("final", str(bundled.library_dir), "--bench", str(bundled.bench),
                          "--manifest", str(bundled.manifest), "--targets", "gfx90a")
    assert failing.returncode == 1 and "has no kernels for gfx90a" in failing.stderr
