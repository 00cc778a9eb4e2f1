#!/bin/sh
# Build RCCL's example tuner plugin (imagebuild's rccl-tuner stage).
#   tuner-build.sh EXAMPLE_DIR ADAPTER LIBRARY SONAME
# The example's plugin.c differs by RCCL release: the CSV example exports ncclTunerPlugin_v5
# where RCCL follows NCCL 2.28 (NVIDIA/nccl ext-tuner/example) and ncclTunerPlugin_v4 before.
# An example that exports v5 and not v4 is built behind ADAPTER (it #includes plugin.c and adds
# ncclTunerPlugin_v4, the interface RCCL 2.27 looks up, and the request recording); one that
# already exports v4 is built as it is. The stage's check then reads what RCCL looks up.
set -eu
cd "$1"
exports=$(grep -o 'ncclTunerPlugin_v[0-9][0-9]*' plugin.c | sort -u | tr '\n' ' ')
if grep -q 'ncclTunerPlugin_v5 *=' plugin.c && ! grep -q 'ncclTunerPlugin_v4 *=' plugin.c; then
    echo "rccl-tuner: plugin.c exports ${exports}: built behind the v4 adapter"
    gcc -O2 -pthread -fPIC -shared -I. -Inccl -o "$3" -Wl,-soname,"$4" "$2"
else
    echo "rccl-tuner: plugin.c exports ${exports}: built as it is (no adapter, so no request recording)"
    gcc -O2 -fPIC -shared -Inccl -o "$3" -Wl,-soname,"$4" plugin.c
fi
