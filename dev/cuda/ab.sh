#!/usr/bin/env bash
# ab.sh - (device machine) one call's work: unpacks build/carry (dev/cuda/carry.sh), runs every
# check of tests/gpu/run.sh on this tree's build (unless CHECKS=0: it writes tests/gpu/VERIFIED
# into $OUT when all pass), the card's floors (gpu_floors), then this build (N) against each
# comparator NAME alternating: the heavy operations alone (gpu_bench_ops), and nemotron bench on a
# synthetic Nemotron-3-Nano-30B-A3B in the default mix (pp420 + tg128, pp2048, verify passes).
#
#   OUT=... bash dev/cuda/ab.sh [NAME ...]          (ROUNDS=2 by default)
#
# NAME is a comparator packed by carry.sh, or NAME:VAR=VAL[,VAR=VAL...], a build (N or a
# comparator) run with those environment variables set (development switches read at run time);
# its operations alone are not timed again. OPS_ROUNDS (default ROUNDS): the rounds of
# gpu_bench_ops.
#
# Logs go to $OUT (ab.log holds everything printed; ops-V-R.log each gpu_bench_ops run, which
# dev/cuda/ops_table.py puts side by side at the end, after dev/cuda/bench_ratios.py's bench
# figures as per-round ratios).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?OUT must name the folder that comes back}"
t0=$(date +%s)
stamp() { echo "-- $* ($(( $(date +%s) - t0 )) s)"; }
export LD_LIBRARY_PATH=$PWD/build/gpu-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
exec > >(tee -a "$OUT/ab.log") 2>&1
tar -xJf build/carry/build.tar.xz
mkdir -p build/compare
[ -f build/carry/compare.tar.xz ] && tar -xJf build/carry/compare.tar.xz -C build/compare
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
[ -f build/carry/kjv-Q4_K_M.gguf ] && export NT_GGUF_FILE=$PWD/build/carry/kjv-Q4_K_M.gguf
if [ "${CHECKS:-1}" = 1 ]; then
    stamp "tests/gpu/run.sh"
    NEMOTRON_PREBUILT=1 bash tests/gpu/run.sh "$OUT"
    echo "run.sh rc=$?"
fi
[ -x build/bin/gpu_floors ] && { stamp "gpu_floors"; build/bin/gpu_floors; }
nano=/tmp/nano-default.nemo
[ -f $nano ] || build/nemotron synth --shape nemotron-3-nano-30b-a3b -o $nano >/dev/null
bin_one() { [ "$1" = N ] && echo build/nemotron || echo build/compare/nemotron-$1; }
with_env() { local e=${2#*:}; [[ $2 == *:* ]] && echo "env ${e//,/ } $($1 "${2%%:*}")" || $1 "$2"; }
bin_of() { with_env bin_one "$1"; }
ops_of() { [ "$1" = N ] && echo build/bin/gpu_bench_ops || echo build/compare/gpu_bench_ops-$1; }
for r in $(seq "${OPS_ROUNDS:-${ROUNDS:-2}}"); do
    for v in N "$@"; do
        [[ $v == *:* ]] && continue # a switch of the passes: the operations alone are the build's
        stamp "round $r $v: gpu_bench_ops"
        $(ops_of "$v") > "$OUT/ops-$v-$r.log" 2>&1 || tail -3 "$OUT/ops-$v-$r.log"
    done
done
# each round starts one build later (the first bench of a call ran ~1.6 % slower, session 18)
builds=(N "$@")
for r in $(seq "${ROUNDS:-2}"); do
    for i in "${!builds[@]}"; do
        v=${builds[$(( (i + r - 1) % ${#builds[@]} ))]}
        stamp "round $r $v: bench -p 420 -n 128 -r 3; -p 2048 -n 16 -r 2"
        $(bin_of "$v") bench -m $nano --device cuda -p 420 -n 128 -r 3 2>&1 | grep -E "pp420|tg128"
        $(bin_of "$v") bench -m $nano --device cuda -p 2048 -n 16 -r 2 2>&1 | grep -E "pp2048"
    done
done
for v in N "$@"; do
    stamp "$v: verify passes"
    $(bin_of "$v") bench -m $nano --device cuda -p 64 -n 32 -r 2 --verify 1,4,12 2>&1 | grep -iE "verify pass"
done
stamp "bench figures per build: tok/s, lowest - highest of the rounds; N against each build, round by round"
python3 dev/cuda/bench_ratios.py "$OUT/ab.log"
stamp "gpu_bench_ops side by side (µs a call; each build's best against N's)"
python3 dev/cuda/ops_table.py "$OUT" 1 16 64 512 | grep -vE "Q[0-9]_|MXFP4| old "
stamp "ab.sh done"
