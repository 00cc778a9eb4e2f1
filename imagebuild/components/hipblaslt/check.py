"""One libhipblaslt for torch and hipblaslt-bench, proved at build time (imagebuild; standard
library only, no GPU).

usage:
  hipblaslt-check.py link LIBRARY_DIR (--into DIR | --into-torch)
      replace every libhipblaslt.so* (and hipblaslt-*.so*, a bundler's renamed copy) and
      the hipblaslt/ kernel directory in DIR (or in the installed torch package's lib/,
      found without importing it) with symbolic links to the built ones in LIBRARY_DIR.
      DIR is <rocm_prefix>/lib for a torch wheel that links the system ROCm (the base
      image's packaged library goes), torch/lib for a wheel that bundles its own.
  hipblaslt-check.py final LIBRARY_DIR [--bench BENCH] --manifest MANIFEST.json
                           [--image-library-path PATH]
      fail unless `import torch` maps exactly the libhipblaslt file that BENCH links (and
      that is LIBRARY_DIR's), in the base image's environment and, with PATH, in the
      image's (PATH first on LD_LIBRARY_PATH); then record both paths in the manifest.
      With --targets, first the kernels check below, recorded too.
  hipblaslt-check.py kernels LIBRARY_DIR --targets gfx942[,gfx90a...]
      fail unless the libhipblaslt in LIBRARY_DIR finds device code for every target in
      the kernel directory it reads: HIPBLASLT_TENSILE_LIBPATH, else hipblaslt/library
      beside the library (or its <target>/ subdirectory): the lazy-loading index
      TensileLibrary_lazy_<target>.dat (or .dat.zlib) and at least one code object (.co,
      .hsaco) named for the target. Without the index, every GEMM on that GPU fails
      ("rocblaslt error: Cannot read ... TensileLibrary_lazy_<target>.dat").

Why: a tuning result (HIPBLASLT_TUNING_OVERRIDE_FILE, find_exact.py's logic) is tied to
one library build (hipBLASLt compares its git revision): a result torch never loads is
useless.
torch's mapping is read from /proc/self/maps after `import torch` in a child process (the
wheel loads libhipblaslt when libtorch_hip is loaded, no GPU needed); the bench's from the
dynamic loader's trace (LD_TRACE_LOADED_OBJECTS=1, what ldd does: the program never runs).
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

from buildtime import fail, manifest_section, update_manifest

#: The child that imports torch and reports the libhipblaslt files mapped into it.
TORCH_MAPS = (
    "import json, os, torch\n"
    "maps = open('/proc/self/maps').read().split()\n"
    "print(json.dumps(sorted({p for p in maps if p.startswith('/')\n"
    "    and os.path.basename(p).startswith('libhipblaslt')})))\n"
)
PATTERNS = ("libhipblaslt.so*", "libhipblaslt-*.so*")



def torch_lib() -> str:
    """torch/lib of the installed torch, found without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        fail(f"no torch package for {sys.executable}: cannot find its lib/ directory")
    return os.path.join(next(iter(spec.submodule_search_locations)), "lib")


def built(library_dir: str) -> str:
    """The real file of the built libhipblaslt in LIBRARY_DIR."""
    library = os.path.join(library_dir, "libhipblaslt.so")
    if not os.path.exists(library):
        fail(f"{library} does not exist: hipBLASLt was not installed to {library_dir}")
    return os.path.realpath(library)


def library_file(library_dir: str) -> str:
    """libhipblaslt.so in LIBRARY_DIR, else its versioned name (a runtime package such as
    Debian's libhipblaslt1 ships libhipblaslt.so.1 only)."""
    for pattern in ("libhipblaslt.so", "libhipblaslt.so.*"):
        found = sorted(glob.glob(os.path.join(library_dir, pattern)))
        if found:
            return found[0]
    fail(f"no libhipblaslt.so* in {library_dir}")


def kernel_directory(library: str) -> str:
    """Where hipBLASLt reads its kernels: HIPBLASLT_TENSILE_LIBPATH, else hipblaslt/library
    beside the library it was loaded from."""
    return os.environ.get("HIPBLASLT_TENSILE_LIBPATH") or os.path.join(
        os.path.dirname(library), "hipblaslt", "library")


def target_pattern(target: str) -> re.Pattern[str]:
    """gfx90a in a file name, not as the start of gfx90ab or gfx1100 for gfx110."""
    return re.compile(rf"(?<![0-9a-z]){re.escape(target)}(?![0-9a-z])")


def kernel_targets(directory: str) -> list[str]:
    """The targets whose lazy-loading index the directory (or a subdirectory) holds."""
    index = re.compile(r"^TensileLibrary_lazy_(gfx[0-9a-z]+)\.dat(\.zlib)?$")
    found = set()
    for _, _, files in os.walk(directory):
        found |= {m.group(1) for m in map(index.match, files) if m}
    return sorted(found)


def kernels(library_dir: str, targets: list[str]) -> dict:
    """Fail unless every target has its index and code objects; what was found."""
    library = library_file(library_dir)
    directory = kernel_directory(library)
    if not os.path.isdir(directory):
        fail(f"{library} reads its kernels from {directory}, which does not exist")
    carried = kernel_targets(directory)
    per_target = {}
    missing = []
    for target in targets:
        base = target.split(":", 1)[0]
        pattern = target_pattern(base)
        places = [directory, os.path.join(directory, base)]
        files = sorted({name for place in places if os.path.isdir(place)
                        for name in os.listdir(place)})
        index = [n for n in files if n in (f"TensileLibrary_lazy_{base}.dat",
                                           f"TensileLibrary_lazy_{base}.dat.zlib")]
        code = [n for n in files if n.endswith((".co", ".hsaco")) and pattern.search(n)]
        per_target[base] = {"index": index, "code_objects": len(code)}
        if not index or not code:
            missing.append(f"{base} ({'no' if not index else 'an'} "
                           f"TensileLibrary_lazy_{base}.dat, {len(code)} code objects)")
    if missing:
        fail(f"{library} has no kernels for {', '.join(missing)} in {directory}, which carries "
             f"{', '.join(carried) or 'no target'}: every hipBLASLt GEMM on such a GPU fails "
             f"(\"Cannot read TensileLibrary_lazy_<target>.dat\"). Build hipBLASLt for these "
             f"targets (hipblaslt.enabled with them in gpu_targets) or use a base image whose "
             f"hipBLASLt carries them.")
    print(f"hipblaslt-check: {library} finds kernels for {', '.join(targets)} in {directory} "
          f"(" + "; ".join(f"{t}: {v['code_objects']} code objects" for t, v in
                           per_target.items()) + f"; it carries {', '.join(carried)})")
    return {"library": library, "directory": directory, "carries": carried,
            "targets": per_target}


def remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def link(args: argparse.Namespace) -> None:
    target = torch_lib() if args.into_torch else args.into
    real = built(args.library_dir)
    if not os.path.isdir(target):
        fail(f"{target} is not a directory")
    if os.path.realpath(target) == os.path.realpath(args.library_dir):
        fail(f"{target} is the built library's own directory: nothing to replace")
    old = sorted({os.path.basename(p) for pattern in PATTERNS
                  for p in glob.glob(os.path.join(target, pattern))})
    if args.into_torch and not old:
        fail(f"{target} holds no libhipblaslt: this torch wheel does not bundle one, so it "
             "loads the system ROCm's (a .lw wheel?); the recipe's torch pin and this wheel "
             "disagree")
    ours = sorted(os.path.basename(p) for p in glob.glob(os.path.join(args.library_dir,
                                                                      "libhipblaslt.so*")))
    for name in old:
        remove(os.path.join(target, name))
    for name in sorted(set(old) | set(ours)):
        source = os.path.join(args.library_dir, name)
        os.symlink(source if name in ours else real, os.path.join(target, name))
    kernels = os.path.join(args.library_dir, "hipblaslt")
    replaced = os.path.lexists(os.path.join(target, "hipblaslt"))
    if replaced:
        remove(os.path.join(target, "hipblaslt"))
    if os.path.isdir(kernels):
        os.symlink(kernels, os.path.join(target, "hipblaslt"))
    print(f"hipblaslt-check: {target}: {', '.join(old) or 'no libhipblaslt'}"
          f"{' and hipblaslt/' if replaced else ''} replaced by links to {args.library_dir}")


def bench_library(bench: str, env: dict[str, str]) -> str:
    """The libhipblaslt the loader resolves for BENCH (its ldd line), as a path."""
    if not os.access(bench, os.X_OK):
        fail(f"{bench} is not an executable: were the clients built?")
    result = subprocess.run([bench], check=False, env=dict(env, LD_TRACE_LOADED_OBJECTS="1"),
                            capture_output=True, text=True)
    lines = [line.strip() for line in result.stdout.splitlines() if "libhipblaslt" in line]
    if result.returncode != 0 or not lines:
        fail(f"the loader's trace of {bench} names no libhipblaslt "
             f"(exit {result.returncode}): {result.stderr.strip() or result.stdout.strip()}")
    missing = [line.strip() for line in result.stdout.splitlines()
               if "not found" in line and "libhipblaslt" not in line]
    if missing:
        fail(f"{bench}: the loader does not find {'; '.join(missing)} (an RPATH that points "
             "where nothing was installed, e.g. $ORIGIN/../llvm/lib for libomp?)")
    name, _, rest = lines[0].partition("=>")
    path = rest.strip().split(" (")[0].strip()
    if not path.startswith("/"):
        fail(f"{bench} needs {name.strip()}, which the loader does not find ({rest.strip()})")
    return path


def shown(path: str) -> str:
    """PATH, and the file it resolves to when that is another name."""
    real = os.path.realpath(path)
    return path if real == path else f"{path} (= {real})"


def torch_libraries(env: dict[str, str]) -> list[str]:
    result = subprocess.run([sys.executable, "-c", TORCH_MAPS], check=False, env=env,
                            capture_output=True, text=True)
    if result.returncode != 0:
        error = result.stderr.strip().splitlines()[-1:] or ["no output"]
        fail(f"import torch failed: {error[0]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def environments(image_path: str | None) -> list[tuple[str, dict[str, str]]]:
    """The image's environment (IMAGE_PATH put first on LD_LIBRARY_PATH, as its ENV does)
    and the base image's (a runtime or site that replaces LD_LIBRARY_PATH, as LUMI's
    libfabric setup does, must still find the one library)."""
    base = dict(os.environ)
    if not image_path:
        return [("", base)]
    current = base.get("LD_LIBRARY_PATH")
    image = dict(base, LD_LIBRARY_PATH=image_path + (f":{current}" if current else ""))
    unchanged = f"={current}" if current else " unset"
    return [(f" with the image's LD_LIBRARY_PATH={image['LD_LIBRARY_PATH']}", image),
            (f" with the base image's environment (LD_LIBRARY_PATH{unchanged})", base)]


def proved(args: argparse.Namespace, real: str, how: str,
           env: dict[str, str]) -> tuple[list[str], str | None]:
    """Fail unless, in ``env``, the bench links and torch maps exactly ``real``."""
    bench = bench_library(args.bench, env) if args.bench else None
    if bench is not None and os.path.realpath(bench) != real:
        fail(f"{args.bench} links {shown(bench)}{how}, not the library installed in "
             f"{args.library_dir} ({real})")
    reference = bench or os.path.join(args.library_dir, "libhipblaslt.so")
    by = (f"hipblaslt-bench links {shown(reference)}" if bench
          else f"hipBLASLt was built into {shown(reference)}")
    mapped = torch_libraries(env)
    if not mapped:
        fail(f"import torch mapped no libhipblaslt{how}, {by}: this torch does not load "
             "hipBLASLt at import, so which library it uses cannot be proved here")
    if sorted({os.path.realpath(p) for p in mapped}) != [real]:
        fail(f"import torch maps {', '.join(shown(p) for p in mapped)}{how}, but {by}: "
             "tuning results made with the bench would never reach training. Replace "
             "torch's copy with links to the built library (hipblaslt-check.py link), or "
             "build the bench from the hipBLASLt commit of torch's copy.")
    return mapped, bench


def final(args: argparse.Namespace) -> None:
    real = built(args.library_dir)
    found = kernels(args.library_dir, args.targets.split(",")) if args.targets else None
    checked = [(how.strip() or "as is", *proved(args, real, how, env))
               for how, env in environments(args.image_library_path)]
    _, mapped, bench = checked[0]
    entry = manifest_section(args.manifest, "hipblaslt")
    loaded = {"file": real, "torch_maps": mapped, "bench_links": bench,
              "checked": [how for how, _, _ in checked],
              "commit": entry.get("commit"), "ref": entry.get("ref")}
    update_manifest(args.manifest, "hipblaslt",
                    {"loaded": loaded, **({"kernels": found} if found is not None else {})})
    print(f"hipblaslt-check: import torch maps {', '.join(mapped)} and hipblaslt-bench "
          f"links {bench or '-'} ({'; '.join(how for how, _, _ in checked)}): one file, "
          f"{real} (hipBLASLt {entry.get('ref')} at {entry.get('commit')})")


def main() -> None:
    parser = argparse.ArgumentParser(prog="hipblaslt-check")
    modes = parser.add_subparsers(dest="mode", required=True)
    linking = modes.add_parser("link")
    linking.add_argument("library_dir")
    where = linking.add_mutually_exclusive_group(required=True)
    where.add_argument("--into")
    where.add_argument("--into-torch", action="store_true")
    checking = modes.add_parser("final")
    checking.add_argument("library_dir")
    checking.add_argument("--bench")
    checking.add_argument("--manifest", required=True)
    checking.add_argument("--image-library-path")
    checking.add_argument("--targets", help="also run the kernels check for these targets")
    device_code = modes.add_parser("kernels")
    device_code.add_argument("library_dir")
    device_code.add_argument("--targets", required=True, help="comma-separated GPU targets")
    args = parser.parse_args()
    if args.mode == "link":
        link(args)
    elif args.mode == "final":
        final(args)
    else:
        kernels(args.library_dir, args.targets.split(","))


if __name__ == "__main__":
    main()
