#!/usr/bin/env bash
# carry.sh - (development machine) packs what one device call needs into build/carry/, which the
# device tool carries (`carry: ["build/carry"]`; the tracked tree plus the carry must stay under
# 64 MiB): the prebuilt binaries of this tree (make gpu-bundle: tests/gpu/run.sh runs them with
# NEMOTRON_PREBUILT=1), the real GGUF its gguf-real check reads, and optionally comparator builds
# of other trees for dev/cuda/ab.sh.
#
#   dev/cuda/carry.sh [NAME=DIR ...]
#
# NAME=DIR: DIR is another checkout's build directory (its nemotron and bin/gpu_bench_ops, e.g. a
# worktree of main at the last verified commit, or build/variant-X from variants.sh); they are
# stripped and packed as NAME. On the device: `bash dev/cuda/ab.sh NAME ...` (after unpacking,
# which ab.sh does itself).
# xz -9e: its 64 MiB window spans the binaries, which share most of their code (the CUDA kernels
# are in each): 8.7 MB against 24.5 with -6 (session 18), where the call's tree must stay small.
set -euo pipefail
cd "$(dirname "$0")/../.."
make -s -j"$(nproc)" gpu-bundle
mkdir -p build/carry
tar -cf - build/nemotron build/bin/gpu_test_ops build/bin/gpu_bench_ops build/bin/test_verify build/bin/test_spec \
    build/bin/test_mtp $( [ -x build/bin/gpu_floors ] && echo build/bin/gpu_floors ) build/gpu-libs \
    build/gpu-sources.sha256 | xz -9e -T2 > build/carry/build.tar.xz
t=$(mktemp -d)
for v in "$@"; do
    name=${v%%=*} dir=${v#*=}
    [[ $name =~ ^[A-Za-z0-9_-]+$ ]] || { echo "carry: bad name '$name'" >&2; exit 2; }
    strip -o "$t/nemotron-$name" "$dir/nemotron"
    strip -o "$t/gpu_bench_ops-$name" "$dir/bin/gpu_bench_ops"
done
# the real GGUF tests/gpu/run.sh checks (../shared is not carried to the device)
gguf=../shared/data/gguf/kjv-Q4_K_M.gguf
[ -f $gguf ] && cp $gguf build/carry/
rm -f build/carry/compare.tar.xz
[ $# -gt 0 ] && tar -cf - -C "$t" . | xz -9e -T2 > build/carry/compare.tar.xz
rm -rf "$t"
ls -la build/carry
echo "carry: $(du -cb build/carry/* | tail -1 | cut -f1) bytes; with the tracked tree: $(( $(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) + $(du -cb build/carry/* | tail -1 | cut -f1) )) of 67108864"
