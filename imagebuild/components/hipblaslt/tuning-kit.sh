#!/bin/sh
# Keep exactly what hipBLASLt's offline GEMM tuning needs, out of a finished build tree
# (imagebuild; runs in the hipblaslt stage, after install.sh and `cmake --install`).
#
# usage: hipblaslt-tuning-kit.sh SRC PREFIX
#   SRC     the hipBLASLt project directory install.sh ran in (holds build/release)
#   PREFIX  where the library was installed; the kit goes to PREFIX/tuning
#
# utilities/find_exact.py is run as `find_exact.py CONFIG BUILD_DIR OUT` and reads, relative
# to BUILD_DIR, hipblaslt-bench and MatchTable.yaml (which maps solution indices to the
# logic YAML files its CreateLogic step rewrites). Where depends on the release:
#   ROCm/hipBLASLt up to rocm-6.4.x: clients/staging/hipblaslt-bench, library/MatchTable.yaml
#   ROCm/rocm-libraries projects/hipblaslt (7.x): clients/hipblaslt-bench,
#                                                 device-library/MatchTable.yaml
# so both paths are read from this release's find_exact.py itself. The kit mirrors them
# under PREFIX/tuning/build/release, copies the logic YAMLs the table names (and only those)
# and points the table at the copies, so the source and build trees stay out of the image:
#   python3 PREFIX/tuning/utilities/find_exact.py tune.yaml PREFIX/tuning/build/release out/
# Where this release reads other paths, the first layout's are links to them as well (no
# second copy): a find_exact.py of the older layout (the one users keep beside their
# traces) and `imagebuild tune gemm --find-exact` run against the same build directory.
set -eu

src=$(cd "$1" && pwd -P)
prefix=$2
build="$src/build/release"
kit="$prefix/tuning"
kit_build="$kit/build/release"
finder="$src/utilities/find_exact.py"

die() { echo "hipblaslt-tuning-kit: $*" >&2; exit 1; }

[ -d "$build" ] || die "no build tree at $build (did install.sh run in $src?)"
[ -f "$finder" ] || die "no utilities/find_exact.py in $src"

# The one quoted build-relative path of each kind that find_exact.py names.
named() {
    found=$(grep -oE "\"/[A-Za-z0-9_./-]*$1\"" "$finder" | tr -d '"' | sort -u)
    [ -n "$found" ] || die "$finder names no $1 path: cannot tell where it reads it"
    [ "$(printf '%s\n' "$found" | wc -l)" -eq 1 ] || \
        die "$finder names several $1 paths: $(printf '%s ' "$found" | tr '\n' ' ')"
    printf '%s\n' "$found"
}
bench_rel=$(named hipblaslt-bench)
table_rel=$(named MatchTable.yaml)

mkdir -p "$kit/utilities" "$(dirname "$kit_build$bench_rel")" "$(dirname "$kit_build$table_rel")"
cp "$finder" "$kit/utilities/"
# The sibling modules it imports (the monorepo's find_exact.py imports fix_yaml_types).
for module in $(sed -nE 's/^(from|import)[[:space:]]+([A-Za-z_][A-Za-z0-9_]*).*/\2/p' "$finder" | sort -u); do
    if [ -f "$src/utilities/$module.py" ]; then
        cp "$src/utilities/$module.py" "$kit/utilities/"
    fi
done

# hipblaslt-bench: the installed copy when `cmake --install` put one in PREFIX/bin (no second
# copy in the image, and it finds PREFIX/lib's library), else the build tree's, from the path
# find_exact.py reads.
if [ -x "$prefix/bin/hipblaslt-bench" ]; then
    ln -sf "$prefix/bin/hipblaslt-bench" "$kit_build$bench_rel"
elif [ -x "$build$bench_rel" ]; then
    cp "$build$bench_rel" "$kit_build$bench_rel"
else
    die "no hipblaslt-bench at $build$bench_rel (where find_exact.py runs it) nor in $prefix/bin (clients not built?)"
fi

table="$build$table_rel"
[ -f "$table" ] || die "no MatchTable.yaml at $table (where find_exact.py reads it)"

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

sed -e "s#$src/#$kit/src/#g" "$table" > "$kit_build$table_rel"

# The older layout's path $1 as a relative link to this release's $2, when they differ.
classic() {
    [ "$1" = "$2" ] && return 0
    up=$(dirname "$1" | sed -e 's#^/##' -e 's#[^/][^/]*#..#g')
    mkdir -p "$(dirname "$kit_build$1")"
    ln -sf "$up${2}" "$kit_build$1"
    [ -e "$kit_build$1" ] || die "the link $kit_build$1 does not resolve"
    echo "hipblaslt-tuning-kit: build/release$1 links build/release$2"
}
classic /clients/staging/hipblaslt-bench "$bench_rel"
classic /library/MatchTable.yaml "$table_rel"
echo "hipblaslt-tuning-kit: kept hipblaslt-bench (build/release$bench_rel), find_exact.py," \
     "MatchTable.yaml (build/release$table_rel) and $count logic YAML files in $kit"
