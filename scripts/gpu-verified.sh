#!/usr/bin/env bash
# gpu-verified.sh - is the CUDA code in this tree the code that passed tests/gpu/run.sh on a GPU?
#
#   scripts/gpu-verified.sh           exits 0 when tests/gpu/VERIFIED matches the sources, else 1
#                                     and names the files that changed since the verified run
#   scripts/gpu-verified.sh --list    prints "sha256  path" for every file the hash covers
#   scripts/gpu-verified.sh --hash    prints the hash over them (what run.sh writes into VERIFIED)
#
# The host emulation runs every kernel in CI but cannot prove one right (docs/TESTING.md): a GPU
# run can. run.sh writes tests/gpu/VERIFIED when every check passed; .ci/run runs this script, so
# CUDA code that changed after its last GPU run cannot land.
#
# What the hash covers, and why:
#   - src/cuda/*: the kernels and the backend;
#   - every repository header those files include, transitively (src/backend.h, src/forward.h,
#     src/model/weights.h, src/quant/quant.h, include/nemotron.h, ...): they fix the structs, the
#     formats' offsets and the constants the kernels compile with;
#   - the Makefile's nvcc flags (-fmad=false and the architecture decide the arithmetic);
#   - tests/gpu/*: the checks themselves (a changed check has not passed until it runs), but not
#     VERIFIED itself.
# Not covered: the CPU engine, the emulation (tests/emu), docs; their own tests run in CI.
set -euo pipefail
cd "$(dirname "$0")/.."

# Repository headers included by the files in the queue, transitively; prints every path once.
closure() {
    local -A seen=()
    local queue=("$@") f inc dir cand
    while [ ${#queue[@]} -gt 0 ]; do
        f=${queue[0]}
        queue=("${queue[@]:1}")
        [ -n "${seen[$f]:-}" ] && continue
        seen[$f]=1
        echo "$f"
        dir=$(dirname "$f")
        while IFS= read -r inc; do
            for cand in "$dir/$inc" "src/$inc" "include/$inc"; do
                if [ -f "$cand" ]; then
                    queue+=("$(realpath --relative-to=. "$cand")")
                    break
                fi
            done
        done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
    done
}

list() {
    {
        closure src/cuda/*
        find tests/gpu -type f ! -name VERIFIED
    } | LC_ALL=C sort -u | while IFS= read -r f; do sha256sum "$f"; done
    # the nvcc flags: the Makefile's lines from CUDA_ARCH to the first blank line after NVCCFLAGS
    printf '%s  %s\n' "$(sed -n '/^CUDA_ARCH/,/^CUDA_SRC/p' Makefile | sha256sum | cut -d' ' -f1)" "Makefile:nvcc-flags"
}

hash() { list | sha256sum | cut -d' ' -f1; }

case "${1:-}" in
--list) list ;;
--hash) hash ;;
"")
    verified=tests/gpu/VERIFIED
    if [ ! -f $verified ]; then
        echo "gpu-verified: $verified is missing: the CUDA code has never passed tests/gpu/run.sh" >&2
        exit 1
    fi
    want=$(sed -n 's/^sources-sha256: //p' $verified)
    have=$(hash)
    if [ "$want" = "$have" ]; then
        echo "gpu-verified: the CUDA sources are the ones that passed on $(sed -n 's/^gpu: //p' $verified) ($(sed -n 's/^date: //p' $verified))"
        exit 0
    fi
    echo "gpu-verified: the CUDA sources changed since they passed tests/gpu/run.sh on a GPU:" >&2
    diff <(sed -n '/^files:/,/^end files/p' $verified | sed '1d;$d') <(list) | sed -n 's/^> /  changed or new: /p' >&2 || true
    echo "run NEMOTRON_PREBUILT=1 tests/gpu/run.sh on a GPU (docs/TESTING.md) and commit the tests/gpu/VERIFIED it writes" >&2
    exit 1
    ;;
*)
    echo "usage: scripts/gpu-verified.sh [--list | --hash]" >&2
    exit 2
    ;;
esac
