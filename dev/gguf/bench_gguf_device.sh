#!/usr/bin/env bash
# bench_gguf_device.sh - the speed of a synthetic model in real GGUF files' block types against the
# same shape in our default mix (issue 18 item 4; docs/PERF.md, "GGUF block types: speed").
#
# usage (from the repository root): bash dev/gguf/bench_gguf_device.sh
#   SHAPE=nemotron-3-nano-30b-a3b   the `nemotron synth` shape (mid: Nano's widths, 6 layers)
#   DEVICE=cuda                     bench's --device (cpu for a local run)
#   DIR=/tmp                        where the files go (disk: Nano's default .nemo ~17 GB, then one
#                                   GGUF at a time, ~21 GB q5 / ~18 GB mxfp4, deleted after its run)
#   PP=512 TG=128 REPS=2            bench's -p, -n, -r;  THREADS=N  bench's -t (the CPU's; default
#                                   the engine's); BIN=build/nemotron
#
# Steps: `nemotron synth --shape SHAPE` to $NEMO (default DIR/nano-default.nemo for Nano, as
# tests/gpu/run.sh names it, else DIR/SHAPE-default.nemo; kept, and reused when there, so a
# second call reuses it), bench it; then for each mix (q5, mxfp4) dev/gguf/synth_gguf.py writes
# the same shape as a GGUF (the config read out of that .nemo), bench runs it, the file is deleted.
# Prints every step's time and a table: file size, bytes read per generated token (bench's
# active_weight_bytes: every matrix a position reads, the routed experts at top-k of n), pp and
# tg tokens/s (mean of REPS), the weight bandwidth decode reaches.
# Time on the H200 machine (16 cores), Nano: synth ~1 min, each GGUF ~0.5 min to write, each
# bench ~0.5-1 min (loading ~20 GB from the page cache, pp512 and tg128 twice): about 5 minutes.
set -u
cd "$(dirname "$0")/../.." || exit 1
shape=${SHAPE:-nemotron-3-nano-30b-a3b}
device=${DEVICE:-cuda}
dir=${DIR:-/tmp}
bin=${BIN:-build/nemotron}
pp=${PP:-512} tg=${TG:-128} reps=${REPS:-2}
threads=()
[ -n "${THREADS:-}" ] && threads=(-t "$THREADS")
nemo=${NEMO:-$dir/${shape/nemotron-3-nano-30b-a3b/nano}-default.nemo}
results=$(mktemp)
trap 'rm -f "$results"' EXIT
t_all=$SECONDS
step() { printf '[%4d s] %s\n' $((SECONDS - t_all)) "$*"; }

bench() { # NAME FILE WRITE_SECONDS
    local t0=$SECONDS line
    step "bench $1"
    line=$("$bin" bench -m "$2" --device "$device" -p "$pp" -n "$tg" -r "$reps" "${threads[@]}" --json 2>"$results.err" | tail -1)
    if [ -z "$line" ]; then
        echo "bench of $2 failed:" >&2
        cat "$results.err" >&2
        return 1
    fi
    echo "$1 $(stat -c %s "$2") $3 $((SECONDS - t0)) $line" >>"$results"
}

step "$shape on $device; files in $dir ($(df -h --output=avail "$dir" | tail -1 | tr -d ' ') free)"
if [ ! -f "$nemo" ]; then
    t0=$SECONDS
    "$bin" synth --shape "$shape" -o "$nemo" || exit 1
    synth_s=$((SECONDS - t0))
else
    step "reusing $nemo"
    synth_s=0
fi
bench default "$nemo" "$synth_s" || exit 1
for mix in q5 mxfp4; do
    gguf=$dir/$shape-$mix.gguf
    step "write $gguf"
    t0=$SECONDS
    python3 dev/gguf/synth_gguf.py "$nemo" "$gguf" --mix "$mix" || exit 1
    bench "$mix" "$gguf" $((SECONDS - t0))
    rm -f "$gguf"
done
step "done"

python3 - "$results" "$shape" "$device" "$pp" "$tg" <<'PY'
import json, sys
path, shape, device, pp, tg = sys.argv[1:]
print(f'\n{shape}, {device}, pp{pp} / tg{tg} (tokens/s: mean of the repetitions, range in brackets)')
print(f'| model | file GB | bytes / token (MB) | pp{pp} t/s | tg{tg} t/s | decode GB/s | write s | bench s |')
print('|---|---|---|---|---|---|---|---|')
for line in open(path):
    name, size, write_s, bench_s, js = line.split(' ', 4)
    j = json.loads(js)
    rng = lambda r: f"{r['tokens_per_s']:.1f} [{min(r['samples']):.1f}-{max(r['samples']):.1f}]"
    print(f"| {name} | {int(size) / 1e9:.2f} | {j['active_weight_bytes'] / 1e6:.1f} | {rng(j['pp'])} | "
          f"{rng(j['tg'])} | {j['decode_weight_gbs']:.1f} | {write_s} | {bench_s} |")
PY
