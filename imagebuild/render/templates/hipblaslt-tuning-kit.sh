#!/bin/sh
# Keep exactly what hipBLASLt's offline GEMM tuning needs, out of a finished build tree
# (imagebuild; runs in the hipblaslt stage, after install.sh and `cmake --install`).
#
# usage: hipblaslt-tuning-kit.sh SRC PREFIX
#   SRC     the hipBLASLt project directory install.sh ran in (holds build/release)
#   PREFIX  where the library was installed; the kit goes to PREFIX/tuning
#
# utilities/find_exact.py (ROCm/rocm-libraries projects/hipblaslt, and ROCm/hipBLASLt before
# the monorepo) is run as `find_exact.py CONFIG BUILD_DIR OUT` and reads, relative to
# BUILD_DIR, clients/hipblaslt-bench and device-library/MatchTable.yaml; MatchTable.yaml
# maps solution indices to the logic YAML files its CreateLogic step rewrites. The kit
# mirrors that layout under PREFIX/tuning/build/release, copies the logic YAMLs the match
# table names (and only those) and points the table at the copies, so the whole source and
# build tree can stay out of the final image:
#   python3 PREFIX/tuning/utilities/find_exact.py tune.yaml PREFIX/tuning/build/release out/
set -eu

src=$(cd "$1" && pwd -P)
prefix=$2
build="$src/build/release"
kit="$prefix/tuning"
kit_build="$kit/build/release"

die() { echo "hipblaslt-tuning-kit: $*" >&2; exit 1; }

[ -d "$build" ] || die "no build tree at $build (did install.sh run in $src?)"
[ -f "$src/utilities/find_exact.py" ] || die "no utilities/find_exact.py in $src"

mkdir -p "$kit/utilities" "$kit_build/clients" "$kit_build/device-library"
cp "$src/utilities/find_exact.py" "$kit/utilities/"

# hipblaslt-bench: the installed copy when `cmake --install` put one in PREFIX/bin (no second
# copy in the image), else the build tree's (clients/ or clients/staging/, by release).
if [ -x "$prefix/bin/hipblaslt-bench" ]; then
    ln -sf "$prefix/bin/hipblaslt-bench" "$kit_build/clients/hipblaslt-bench"
else
    bench=$(find "$build/clients" -name hipblaslt-bench -type f | sort | head -n 1)
    [ -n "$bench" ] || die "no hipblaslt-bench under $build/clients (clients not built?)"
    cp "$bench" "$kit_build/clients/hipblaslt-bench"
fi

table=$(find "$build" -name MatchTable.yaml -type f | sort | head -n 1)
[ -n "$table" ] || die "no MatchTable.yaml under $build"

# Every logic YAML the table names. Absolute names (inside the source tree) are copied to
# PREFIX/tuning/src/ and the table is rewritten to point there; relative names are taken
# relative to the build directory and keep their place under the kit's build directory.
count=0
for name in $(grep -o '[A-Za-z0-9_./+-]*\.yaml' "$table" | sort -u); do
    case $name in
        /*)
            case $name in
                "$src"/*) target="$kit/src/${name#"$src"/}" ;;
                *) die "MatchTable.yaml names $name, outside the source tree $src" ;;
            esac
            file=$name ;;
        *)
            target="$kit_build/$name"
            file="$build/$name" ;;
    esac
    [ -f "$file" ] || die "MatchTable.yaml names $name, which does not exist"
    mkdir -p "$(dirname "$target")"
    cp "$file" "$target"
    count=$((count + 1))
done
[ "$count" -gt 0 ] || die "MatchTable.yaml names no logic YAML files"

sed -e "s#$src/#$kit/src/#g" "$table" > "$kit_build/device-library/MatchTable.yaml"
echo "hipblaslt-tuning-kit: kept hipblaslt-bench, find_exact.py, MatchTable.yaml and $count" \
     "logic YAML files in $kit"
