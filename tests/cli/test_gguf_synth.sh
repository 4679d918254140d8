#!/usr/bin/env bash
# test_gguf_synth.sh - synthetic models written as GGUF files in real files' block types
# (dev/gguf/synth_gguf.py, issue 18 item 4's speed measurements) load and run.
#
# usage (from the repository root, as tests/run.sh does): bash tests/cli/test_gguf_synth.sh build/nemotron
#
# For the bundled model's shape (fast tier; its widths are whole K-quant blocks) and, in the full
# tier (NEMOTRON_TEST_FULL=1), for `nemotron synth --shape mid`'s shape read out of the .nemo
# (Nano's widths, 16 experts: 0.3-0.4 GB per file), in both mixes:
#   - the file holds exactly the mix's block types (gguf-info's table by type): q5 = Q5_0 +
#     Q5_1 + Q8_0 + Q4_K + Q5_K (+ F32), mxfp4 = MXFP4 + Q5_1 (+ F32);
#   - `generate` runs on it, and its logits are finite with a standard deviation within a factor
#     of 10 of 1 at every position of a 16-token sequence (the values are drawn so that each
#     product keeps its input's scale, as `nemotron synth`'s; the norms absorb an inner layer's
#     wrong scale, so this catches a non-finite value anywhere and a wrong scale of the head:
#     100 times too large a Q5_1 scale fails the mxfp4 file);
#   - `bench` runs on it and reports the bytes it reads per position;
#   - the file is the same for a seed whatever --jobs, and a shape whose widths are not whole
#     blocks of the mix's types is refused naming the tensor (fast tier);
#   - `convert` writes a .nemo of it that holds every matrix in its GGUF block type (the formats
#     ggml.Q5_0, ... of nemotron.tensors) and gives logits bit-identical to the GGUF's (cmp of
#     the .npy: the same kernels on the same bytes); `--quant q8_2f` gives the same file's
#     logits too (a mix packs float tensors only, never blocks);
#   - .nemo files with one block-typed entry made wrong (tests/tools/edit_nemo.py: an unknown
#     block type ggml.Q3_K, rows that do not match the stored bytes, columns not whole Q8_0 /
#     Q4_K blocks) are refused with exit status 1 and a message naming the tensor and the fault.
# Needs python3 (standard library only). Prints one summary line.
suite=gguf_synth
. "$(dirname "$0")/checks.sh"
synth() { python3 dev/gguf/synth_gguf.py "$@" >"$work/synth.log" 2>&1 || { cat "$work/synth.log" >&2; return 1; }; }
tokens=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16

# has_types FILE TYPE...: gguf-info's table by type names exactly these types (and F32)
has_types() {
    local f=$1
    shift
    local got want
    got=$("$bin" gguf-info "$f" 2>/dev/null | sed -n '/^by type:/,$p' | awk '/^  / && $1 != "total" {print $1}' | sort | tr '\n' ' ')
    want=$(printf '%s\n' F32 "$@" | sort | tr '\n' ' ')
    [ "$got" = "$want" ] || { echo "$f: types '$got', expected '$want'" >&2; return 1; }
}
# sane_logits FILE: every logit finite, their standard deviation in [0.1, 10]
sane_logits() {
    "$bin" logits -m "$1" --tokens "$tokens" -o "$work/l.npy" >/dev/null 2>"$work/l.log" || { cat "$work/l.log" >&2; return 1; }
    python3 - "$work/l.npy" <<'PY'
import math, struct, sys
b = open(sys.argv[1], 'rb').read()
hl = struct.unpack('<H', b[8:10])[0]
v = struct.unpack(f'<{(len(b) - 10 - hl) // 4}f', b[10 + hl:])
bad = sum(1 for x in v if not math.isfinite(x))
mean = sum(v) / len(v) if not bad else 0
sd = math.sqrt(sum((x - mean) ** 2 for x in v) / len(v)) if not bad else 0
ok = not bad and 0.1 <= sd <= 10
if not ok:
    print(f'{sys.argv[1]}: {bad} non-finite logits, sd {sd:.4g}', file=sys.stderr)
sys.exit(0 if ok else 1)
PY
}
generates() { "$bin" generate -m "$1" --tokens "$tokens" -n 4 >/dev/null 2>"$work/g.log" || { cat "$work/g.log" >&2; return 1; }; }
benches() {
    "$bin" bench -m "$1" -p 16 -n 4 -r 1 -t 2 >"$work/b.log" 2>&1 || { cat "$work/b.log" >&2; return 1; }
    grep -q "MB per position" "$work/b.log" || { echo "bench printed no bytes per position" >&2; return 1; }
}
# the logits of the 16 tokens of MODEL into FILE
logits_of() { "$bin" logits -m "$1" --tokens "$tokens" -o "$2" >/dev/null 2>"$work/l.log" || { cat "$work/l.log" >&2; return 1; }; }
# lossless GGUF NEMO [CONVERT-OPTIONS...]: the .nemo converted from GGUF gives its logits bit for bit
lossless() {
    local gguf=$1 nemo=$2
    shift 2
    "$bin" convert "$gguf" -o "$nemo" -t 2 "$@" >/dev/null 2>"$work/c.log" || { cat "$work/c.log" >&2; return 1; }
    logits_of "$gguf" "$work/g.npy" && logits_of "$nemo" "$work/n.npy" && cmp "$work/g.npy" "$work/n.npy"
}
# nemo_formats NEMO FORMAT...: nemotron.tensors names exactly these formats (and F32, file)
nemo_formats() {
    python3 - "$@" <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
h = json.loads(b[8:8 + struct.unpack('<Q', b[:8])[0]])
got = sorted({v['format'] for v in json.loads(h['__metadata__']['nemotron.tensors']).values()})
want = sorted(set(sys.argv[2:]) | {'F32', 'file'})
if got != want:
    print(f'{sys.argv[1]}: formats {got}, expected {want}', file=sys.stderr)
sys.exit(got != want)
PY
}
# refused_nemo NEMO FORMAT EDIT WORDS: the edited file fails to load, exit 1, naming the tensor
refused_nemo() {
    local name rc
    name=$(python3 tests/tools/edit_nemo.py "$1" "$work/bad.nemo" "$2" "$3") || return 1
    "$bin" generate -m "$work/bad.nemo" --tokens 1 -n 1 >/dev/null 2>"$work/bad.log"
    rc=$?
    [ $rc -eq 1 ] && grep -qF "tensor '$name'" "$work/bad.log" && grep -qF -- "$4" "$work/bad.log" ||
        { echo "exit $rc, expected 1 and '$name', '$4' in: $(cat "$work/bad.log")" >&2; return 1; }
}
# runs_mixes SOURCE NAME: both mixes of SOURCE's shape written, typed, run, benched
runs_mixes() {
    local src=$1 name=$2
    check "$name q5: written" synth "$src" "$work/$name-q5.gguf" --mix q5 --jobs 2
    check "$name q5: its block types" has_types "$work/$name-q5.gguf" Q5_0 Q5_1 Q8_0 Q4_K Q5_K
    check "$name q5: generate runs" generates "$work/$name-q5.gguf"
    check "$name q5: logits finite and of unit scale" sane_logits "$work/$name-q5.gguf"
    check "$name mxfp4: written" synth "$src" "$work/$name-mxfp4.gguf" --mix mxfp4 --jobs 2
    check "$name mxfp4: its block types" has_types "$work/$name-mxfp4.gguf" MXFP4 Q5_1
    check "$name mxfp4: logits finite and of unit scale" sane_logits "$work/$name-mxfp4.gguf"
    check "$name mxfp4: bench runs and reports bytes per position" benches "$work/$name-mxfp4.gguf"
    check "$name q5: convert to .nemo: logits bit-identical" lossless "$work/$name-q5.gguf" "$work/$name-q5.nemo"
    check "$name q5: the .nemo keeps every block type" \
        nemo_formats "$work/$name-q5.nemo" ggml.Q5_0 ggml.Q5_1 ggml.Q8_0 ggml.Q4_K ggml.Q5_K
    check "$name mxfp4: convert to .nemo: logits bit-identical" lossless "$work/$name-mxfp4.gguf" "$work/$name-mxfp4.nemo"
    check "$name mxfp4: the .nemo keeps every block type" nemo_formats "$work/$name-mxfp4.nemo" ggml.MXFP4 ggml.Q5_1
    check "$name q5: --quant q8_2f keeps the blocks: logits bit-identical" \
        lossless "$work/$name-q5.gguf" "$work/$name-q5-mix.nemo" --quant q8_2f
}

runs_mixes "$model" kjv
check "the same file whatever --jobs" synth "$model" "$work/j1.gguf" --mix q5 --jobs 1
check "  (compared)" cmp -s "$work/j1.gguf" "$work/kjv-q5.gguf"
# Mamba inner width 8 x 40 = 320: ssm_out's rows are not whole Q4_K blocks (256)
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["mamba_head_dim"] = 40; json.dump(c, open(sys.argv[2], "w"))' \
    "$model/config.json" "$work/odd.json"
refused_odd() {
    ! python3 dev/gguf/synth_gguf.py "$work/odd.json" "$work/odd.gguf" --mix q5 --jobs 1 2>"$work/odd.log" &&
        grep -q "blk.0.ssm_out.weight: 320 columns are not whole Q4_K blocks" "$work/odd.log"
}
check "a width not whole blocks: refused naming the tensor" refused_odd
check ".nemo: unknown block type refused" refused_nemo "$work/kjv-q5.nemo" ggml.Q5_0 format=ggml.Q3_K \
    'unknown format "ggml.Q3_K"'
check ".nemo: rows not matching the stored bytes refused" refused_nemo "$work/kjv-q5.nemo" ggml.Q5_1 rows+1 \
    "is a payload of"
check ".nemo: columns not whole Q8_0 blocks refused" refused_nemo "$work/kjv-q5.nemo" ggml.Q8_0 cols+16 \
    "is not a multiple of Q8_0's block of 32"
check ".nemo: columns not whole Q4_K blocks refused" refused_nemo "$work/kjv-q5.nemo" ggml.Q4_K cols+32 \
    "is not a multiple of Q4_K's block of 256"
loads_rewritten() { # the header written again unchanged: the file loads (the edit alone is the fault)
    python3 tests/tools/edit_nemo.py "$work/kjv-q5.nemo" "$work/same.nemo" ggml.Q5_0 rows+0 >/dev/null &&
        "$bin" generate -m "$work/same.nemo" --tokens 1 -n 1 >/dev/null 2>&1
}
check ".nemo: the header rewritten without an edit loads" loads_rewritten
if [ "${NEMOTRON_TEST_FULL:-0}" != 0 ]; then
    check "synth --shape mid" "$bin" synth --shape mid -o "$work/mid.nemo" 2>/dev/null
    runs_mixes "$work/mid.nemo" mid
    rm -f "$work/mid.nemo" "$work"/mid-*.gguf
fi
checks_summary
