#!/usr/bin/env bash
# variants.sh - builds build/bin/gpu_bench_ops for variants of the CUDA kernels, each in its own
# build directory, so one device call can time them side by side against the kernel on main.
#
#   dev/cuda/variants.sh NAME=FLAGS ...     e.g.  dev/cuda/variants.sh g4="-DGV_CHUNKS=4" m3="-DGV_MIN_BLOCKS=3"
#
# FLAGS are nvcc flags added to the architecture (CUDA_ARCH), typically -D values of the macros a
# kernel file leaves open for this (products.cu: GV_CHUNKS, GV_MIN_BLOCKS). Each variant goes to
# build/variant-NAME/bin/gpu_bench_ops; the script prints the device command and the paths to
# carry. Variants are measurements, not code: a winner becomes the default in the kernel file,
# and passes tests/gpu/run.sh before it lands (docs/TESTING.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -gt 0 ] || { sed -n '2,12p' "$0"; exit 2; }
arch="-gencode arch=compute_90,code=sm_90"
names=()
for v in "$@"; do
    name=${v%%=*}
    flags=${v#*=}
    [[ $name =~ ^[A-Za-z0-9_-]+$ ]] || { echo "variants: bad name '$name'" >&2; exit 2; }
    echo "variants: building $name ($flags)"
    make -s -j"$(nproc)" REL="build/variant-$name" CUDA_ARCH="$arch $flags" "build/variant-$name/bin/gpu_bench_ops"
    names+=("$name")
done
make -s -j"$(nproc)" gpu-bundle
echo
echo "carry: build/gpu-libs build/bin/gpu_bench_ops$(printf ' build/variant-%s/bin/gpu_bench_ops' "${names[@]}")"
echo "run:   export LD_LIBRARY_PATH=\$PWD/build/gpu-libs; for b in build/bin $(printf 'build/variant-%s/bin ' "${names[@]}")"\
     "; do echo == \$b; \$b/gpu_bench_ops; done"
