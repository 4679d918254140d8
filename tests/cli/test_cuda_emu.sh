#!/usr/bin/env bash
# test_cuda_emu.sh - whole models on the CUDA backend run by the host emulation (build/emu/nemotron,
# tests/emu/cuda_emu.h), against the CPU backend: what tests/gpu/run.sh checks on a GPU, here on
# any machine, so every change to src/cuda is run in CI.
#
# usage (from the repository root, as tests/run.sh does): bash tests/cli/test_cuda_emu.sh build/nemotron
#
# Checks that
#   - the logits of every transformers fixture (its first 100 positions in the fast tier, all in
#     the full one: docs/TESTING.md) match the CPU's: float weights within 1e-4
#     relative (fixed-tree norms and attention against serial sums); the default packed mix within
#     a quarter of the quantization's own difference (tests/gpu/run.sh says why);
#   - greedy tokens of the demo model (16 fast, 32 full) equal the CPU's, bf16 and default mix;
#   - within CUDA, a 72-token prompt of the default-mix demo in one pass (tensor-core products),
#     in passes of 7 and of 1 (dp4a products) gives bit-identical logits (one arithmetic per
#     position). tests/gpu/run.sh checks more of this on a GPU, where it is fast;
#   - NaN in the final norm's weights: generate and run --temp 0 fail naming position 0 (the CUDA
#     argmax's degenerate row), as on the CPU;
#   - rehearsed pass programs (src/engine/rehearsal.c): speculative runs of the demo (n-gram,
#     MTP) print plain decoding's tokens, every kind they rehearse is confirmed by its first pass
#     and never captured again, and none differs or is declined;
#   - a .nemo converted from a GGUF in llama.cpp's block types (dev/gguf/synth_gguf.py, q5 mix)
#     gives the GGUF's logits bit for bit on CUDA too (the same dtypes, so the same kernels).
# Runs in the release and the ASan build (there every kernel's memory access is checked); skipped,
# with a line saying so, on a machine that is not x86-64 (no emulated binary). Needs python3 with
# numpy.
set -u
cd "$(dirname "$0")/../.." || exit 1
bin=${1:-build/nemotron}
emu=$(dirname "$bin")/emu/nemotron
checks=0
failed=0
pass() { checks=$((checks + 1)); }
fail() { checks=$((checks + 1)); failed=$((failed + 1)); echo "FAIL cuda-emu: $*" >&2; }
summary() { printf '%-28s %d checks, %d failed\n' cuda-emu "$checks" "$failed"; [ "$failed" -eq 0 ]; }
if [ ! -x "$emu" ]; then
    printf '%-28s skipped: %s not built (x86-64 only)\n' cuda-emu "$emu"
    exit 0
fi

source tests/support/python_numpy.sh
if [ -z "$py" ]; then
    fail "no python3 with numpy (run scripts/setup.sh)"
    summary
    exit 1
fi
work=$(mktemp -d /tmp/nemotron-test-cuda-emu.XXXXXX)
trap 'rm -rf "$work"' EXIT
ids_of() { $py -c "import numpy as n,sys; print(','.join(map(str, n.fromfile(sys.argv[1], n.int32)[:int(sys.argv[2])])))" "$@"; }
# the fast tier (make test) compares each fixture's first 100 positions (one CUDA pass, every
# kernel, attention over 100 keys) and 16 greedy tokens of the demo; the full tier
# (NEMOTRON_TEST_FULL=1: CI) all positions (130 to 300) and 32 tokens: the emulation takes a
# second per 20 positions
n_pos=100 n_greedy=16
[ "${NEMOTRON_TEST_FULL:-0}" != 0 ] && n_pos=1000 n_greedy=32

# fixtures: float weights, then the default mix (held against its own quantization difference)
for dir in tests/fixtures/*/; do
    f=$(basename "$dir")
    [ -f "$dir/ids.i32" ] || continue
    ids=$(ids_of "$dir/ids.i32" $n_pos)
    if "$bin" logits -m "$dir" --tokens "$ids" -o "$work/$f.cpu.npy" >/dev/null 2>"$work/err" &&
        "$emu" logits -m "$dir" --tokens "$ids" -o "$work/$f.cuda.npy" --device cuda >/dev/null 2>>"$work/err" &&
        $py tests/gpu/compare.py "$f" "$work/$f.cpu.npy" "$work/$f.cuda.npy" 1e-4 >"$work/cmp" 2>&1; then
        pass
    else
        fail "fixture $f, float weights: $(cat "$work/err" "$work/cmp" 2>/dev/null | tail -2)"
    fi
    if "$bin" convert "$dir" -o "$work/$f.nemo" --quant default >/dev/null 2>"$work/err" &&
        "$bin" logits -m "$work/$f.nemo" --tokens "$ids" -o "$work/$f.qcpu.npy" >/dev/null 2>>"$work/err" &&
        "$emu" logits -m "$work/$f.nemo" --tokens "$ids" -o "$work/$f.qcuda.npy" --device cuda >/dev/null 2>>"$work/err" &&
        $py tests/gpu/compare.py "$f packed" "$work/$f.qcpu.npy" "$work/$f.qcuda.npy" 0.25 "$work/$f.cpu.npy" \
            >"$work/cmp" 2>&1; then
        pass
    else
        fail "fixture $f, default mix: $(cat "$work/err" "$work/cmp" 2>/dev/null | tail -2)"
    fi
done

# the demo model: greedy tokens (16 fast, 32 full), CPU == CUDA, bf16 and the default mix
demo=models/nemotron-h-kjv
prompt=1170,290,2281
"$bin" convert $demo -o "$work/demo.nemo" --quant default >/dev/null 2>&1 || fail "convert the demo model"
for m in $demo "$work/demo.nemo"; do
    if "$bin" generate -m "$m" --tokens $prompt -n $n_greedy --ignore-eos >"$work/g.cpu" 2>/dev/null &&
        "$emu" generate -m "$m" --tokens $prompt -n $n_greedy --ignore-eos --device cuda >"$work/g.cuda" 2>/dev/null &&
        cmp -s <(head -1 "$work/g.cpu") <(head -1 "$work/g.cuda"); then
        pass
    else
        fail "greedy $n_greedy tokens of $m differ: cpu $(head -1 "$work/g.cpu" | cut -c1-80) cuda $(head -1 "$work/g.cuda" | cut -c1-80)"
    fi
done

# non-finite logits: the CUDA argmax marks the row (-1) and the pass fails naming the position, as
# on the CPU (test_cli_habits.sh), without reading the logits back; `run --temp 0` (a greedy
# sampler: the session's argmax, the logits left on the device) fails the same way
cp -r $demo "$work/nan"
python3 tests/tools/poison_safetensors.py "$work/nan/model.safetensors" backbone.norm_f.weight ||
    fail "poison the demo's final norm"
for cmd in "generate --tokens 1,2,3 -n 4" "run -p And -n 4 --temp 0"; do
    "$emu" $cmd -m "$work/nan" --device cuda >"$work/out" 2>"$work/err"
    rc=$?
    if [ $rc -ne 0 ] && grep -q 'logits of position 0 are not finite' "$work/err"; then
        pass
    else
        fail "NaN in the final norm, $cmd on CUDA: exit $rc, $(tail -1 "$work/err")"
    fi
done

# within CUDA, the default mix (the packed products have CUDA's own arithmetic): one pass of 72
# (the default pass size, 512, holds them; its tensor-core kernels), passes of 7 and of 1 (dp4a
# kernels) give the same bits
text=$(for i in $(seq 0 71); do printf '%d,' $(((i * 7919) % 4000 + 10)); done)
text=${text%,}
for p in 512 7 1; do
    "$emu" logits -m "$work/demo.nemo" --tokens "$text" -o "$work/p$p.npy" --device cuda --pass $p >/dev/null 2>&1 ||
        fail "logits --pass $p"
done
for p in 512 7; do
    if cmp -s "$work/p1.npy" "$work/p$p.npy"; then pass; else fail "logits of passes of $p differ from passes of 1"; fi
done

# rehearsed pass programs: the output is plain decoding's, and the log says each rehearsed kind was
# the pass's program (its first pass confirms it) and was not captured again
quote="In the beginning God created the heaven and the earth. In the beginning God"
"$emu" run -m $demo -p "$quote" -n 12 --temp 0 --ignore-eos --device cuda >"$work/r.plain" 2>/dev/null ||
    fail "rehearsal: plain run"
for spec in ngram mtp; do
    if NEMOTRON_CUDA_GRAPHS=log "$emu" run -m $demo -p "$quote" -n 12 --temp 0 \
        --ignore-eos --device cuda --spec $spec >"$work/r.$spec" 2>"$work/r.$spec.log" &&
        cmp -s "$work/r.plain" "$work/r.$spec"; then
        pass
    else
        fail "rehearsal: --spec $spec output differs from plain decoding's (or failed: $(tail -1 "$work/r.$spec.log"))"
    fi
    rehearsed=$(grep -c "^cuda graph: rehearsed" "$work/r.$spec.log")
    confirmed=$(grep -c "the rehearsed program is the pass's" "$work/r.$spec.log")
    bad=$(grep -E "differs|declined" "$work/r.$spec.log")
    again=$(sed -n 's/^cuda graph: captured \(n=[0-9]* want=[0-9]* snap=[0-9]* embd=[0-9]* mtp=[0-9]* keep=[0-9]*\).*/\1/p' \
        "$work/r.$spec.log" | while read -r kind; do grep -q "rehearsed $kind" "$work/r.$spec.log" && echo "$kind"; done)
    if [ "$rehearsed" -ge 3 ] && [ "$confirmed" -ge 2 ] && [ -z "$bad" ] && [ -z "$again" ]; then
        pass
    else
        fail "rehearsal --spec $spec: $rehearsed rehearsed, $confirmed confirmed, differs/declined: '$bad', captured again: '$again'"
    fi
done

# a GGUF's block types kept in a .nemo: the CUDA logits of both files are the same bits
if python3 dev/gguf/synth_gguf.py $demo "$work/q5.gguf" --mix q5 --jobs 1 >/dev/null 2>&1 &&
    "$bin" convert "$work/q5.gguf" -o "$work/q5.nemo" >/dev/null 2>&1 &&
    "$emu" logits -m "$work/q5.gguf" --tokens "$prompt" -o "$work/g.npy" --device cuda >/dev/null 2>&1 &&
    "$emu" logits -m "$work/q5.nemo" --tokens "$prompt" -o "$work/n.npy" --device cuda >/dev/null 2>&1 &&
    cmp -s "$work/g.npy" "$work/n.npy"; then pass
else fail "CUDA logits of a .nemo converted from a block-typed GGUF differ from the GGUF's (or a step failed)"; fi
summary
