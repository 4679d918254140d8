#!/usr/bin/env bash
# run.sh - every check of the CUDA backend, on a GPU machine, in one call.
#
#   tests/gpu/run.sh [OUT_DIR] [--bench | --bench-only]
#
# Builds (make cpu gpu-test) unless a carried build is given in NEMOTRON_PREBUILT=1 (the device
# machine may lack the -dev packages: then build/ is built on the development machine and
# carried, with the shared libraries it needs in build/gpu-libs), then:
#   1. ops:       every backend operation, CUDA against the CPU reference, on random inputs
#                 (build/bin/gpu_test_ops: its own named tolerances); verify: verify passes,
#                 accept, snapshots and embeddings input on whole models (build/bin/test_verify);
#                 spec: speculative decoding gives plain decoding's tokens (build/bin/test_spec);
#                 rehearsal: rehearsed pass programs change no token;
#                 gguf-real: a real GGUF on CUDA against the CPU, and its .nemo bit for bit;
#                 mtp: the MTP step against its reference (build/bin/test_mtp);
#   2. fixtures:  whole-model logits of every transformers fixture, CUDA against CPU, float
#                 weights and the default packed mix (.nemo);
#   3. greedy:    64 greedy tokens of the demo model (bf16 and default mix), CUDA == CPU;
#   4. passes:    within CUDA, prefill-then-decode (--pass 64) against decode-only (--pass 1):
#                 same greedy tokens, logits compared (bit-identical is the goal; said which);
#   5. sanitizer: compute-sanitizer memcheck and racecheck on the demo model;
#   6. --bench:   nemotron bench on a synthetic Nemotron-3-Nano-30B-A3B in the default mix (prompts,
#                 decode, verify passes), the heavy operations alone (build/bin/gpu_bench_ops) and a per-operation profile.
# --bench-only runs step 6 alone (the checks and the benchmarks may not fit one 10-minute call).
# Prints one line per check and a summary; exits non-zero if any check failed. Work files go to
# /tmp/nemotron-gpu; OUT_DIR (default: that) receives summary.txt and logs.tgz (every log).
# When the checks ran and all passed, it writes tests/gpu/VERIFIED (and a copy in OUT_DIR): the
# hash of the CUDA sources (scripts/gpu-verified.sh says which), the GPU, the date and the
# summary. Commit that file: CI refuses CUDA sources that differ from it.
set -uo pipefail
cd "$(dirname "$0")/../.."
log=/tmp/nemotron-gpu
out=$log
bench=0
checks=1
for a in "$@"; do
    case $a in
    --bench) bench=1 ;;
    --bench-only) bench=1 checks=0 ;;
    *) out=$a ;;
    esac
done
mkdir -p "$log" "$out"
bin=build/nemotron
sources=$(scripts/gpu-verified.sh --hash)
if [ "${NEMOTRON_PREBUILT:-0}" = 1 ]; then
    export LD_LIBRARY_PATH=$PWD/build/gpu-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    # the carried binaries must be built from these sources, or passing proves nothing about them
    if [ "$(cat build/gpu-sources.sha256 2>/dev/null)" != "$sources" ]; then
        echo "run.sh: build/ was not built from these sources (make gpu-bundle records their hash): rebuild" >&2
        exit 1
    fi
else
    make -s -j"$(nproc)" cpu gpu-test >"$log/build.log" 2>&1 || { cat "$log/build.log"; exit 1; }
fi

# Tolerances of CUDA against the CPU reference, relative L2 error of a position's logits:
# float weights: the products follow the CPU's chains, but norms and attention reduce in
# fixed trees instead of one serial sum (last-bit differences, amplified a little by the layers:
# the CPU itself is within 2e-6 of transformers), so 1e-4 is 50x what those bits can explain.
FLOAT_TOL=1e-4
# packed weights: the activations are rounded to int8 per block of 32; a last-bit difference
# upstream can move one activation across a rounding boundary (one step = 1/127 of the block's
# largest value), and the random fixtures amplify such steps as they amplify quantization itself
# (their packed logits are 0.2-0.3 away from the float ones). So CUDA-vs-CPU is held against the
# quantization's own difference: at most a quarter of ||packed - float|| on the CPU. The packed
# products sum in another float order than the CPU's (src/cuda/products.cu; gpu_test_ops holds
# them within TOL_PACKED), which moves roundings the same way upstream float bits do.
PACKED_SHARE=0.25

failed=0
results=()
check() { # check NAME COMMAND...: runs a check, records PASS/FAIL
    local name=$1
    shift
    "$@" >"$log/$name.log" 2>&1
    local rc=$?
    if [ $rc = 0 ]; then
        results+=("PASS  $name  $(tail -1 "$log/$name.log")")
    elif [ $rc = 77 ]; then # the program's own "cannot run here"
        results+=("SKIP  $name  $(tail -1 "$log/$name.log")")
    else
        results+=("FAIL  $name  $(tail -3 "$log/$name.log" | tr '\n' ' ')")
        failed=1
    fi
    echo "${results[-1]}"
}
ids_of() { python3 -c "import numpy as n,sys; print(','.join(map(str, n.fromfile(sys.argv[1], n.int32)[:int(sys.argv[2])])))" "$@"; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$log/gpu.txt"

if [ $checks = 1 ]; then
# 1. every operation against the CPU
[ -x build/bin/gpu_test_ops ] && check ops build/bin/gpu_test_ops
# 1b. verify passes + accept, snapshots and embeddings input on every fixture and the demo model,
#     CPU and CUDA: bit-identical to plain evals within each backend (build/bin/test_verify)
[ -x build/bin/test_verify ] && check verify build/bin/test_verify
# 1c. speculative decoding (n-gram, draft model, caller drafts) gives plain decoding's tokens, greedy
#     and sampled, on every fixture and the demo model, CPU and CUDA (build/bin/test_spec)
[ -x build/bin/test_spec ] && check spec build/bin/test_spec
# 1d. the MTP step against its PyTorch reference, chained drafts, pass sizes and snapshots, CPU
#     and CUDA (build/bin/test_mtp)
[ -x build/bin/test_mtp ] && check mtp build/bin/test_mtp

# 2. fixtures: float weights, then the default packed mix
logits_pair() { # logits_pair NAME MODEL IDS TOL [REFERENCE.npy]
    local name=$1 model=$2 ids=$3 tol=$4
    $bin logits -m "$model" --tokens "$ids" -o "$log/$name.cpu.npy" &&
        $bin logits -m "$model" --tokens "$ids" -o "$log/$name.cuda.npy" --device cuda &&
        python3 tests/gpu/compare.py "$name" "$log/$name.cpu.npy" "$log/$name.cuda.npy" "$tol" ${5:-}
}
for dir in tests/fixtures/*/; do
    f=$(basename "$dir")
    [ -f "$dir/ids.i32" ] || continue
    ids=$(ids_of "$dir/ids.i32" 1000)
    check "fixture-$f" logits_pair "fixture-$f" "$dir" "$ids" $FLOAT_TOL
    check "fixture-$f-convert" $bin convert "$dir" -o "$log/$f.nemo" --quant default
    check "fixture-$f-packed" logits_pair "fixture-$f-packed" "$log/$f.nemo" "$ids" $PACKED_SHARE \
        "$log/fixture-$f.cpu.npy"
done

# 3. greedy tokens of the demo model, CUDA == CPU (bf16 weights, then the default mix)
demo=models/nemotron-h-kjv
prompt=1170,290,2281
greedy_same() { # greedy_same MODEL
    $bin generate -m "$1" --tokens $prompt -n 64 --ignore-eos >"$log/greedy.cpu" &&
        $bin generate -m "$1" --tokens $prompt -n 64 --ignore-eos --device cuda >"$log/greedy.cuda" &&
        cmp <(head -1 "$log/greedy.cpu") <(head -1 "$log/greedy.cuda") &&
        echo "64 tokens identical: $(head -1 "$log/greedy.cuda" | cut -c1-60)..."
}
check greedy-demo-bf16 greedy_same $demo
check demo-convert $bin convert $demo -o "$log/demo.nemo" --quant default
check greedy-demo-packed greedy_same "$log/demo.nemo"

# 3b. rehearsed pass programs (src/engine/rehearsal.c): speculative runs of the demo print plain
#     decoding's tokens (the rehearsals captured while the stream still runs the pass before);
#     none differs or is declined
rehearsal_same() {
    local quote="In the beginning God created the heaven and the earth. And the earth was without form, and void. In the beginning God"
    $bin run -m $demo -p "$quote" -n 64 --temp 0 --ignore-eos --device cuda >"$log/rehearse.plain" || return 1
    local spec n=0
    for spec in "--spec ngram" "--spec mtp" "--draft-model models/nemotron-h-kjv-draft"; do
        NEMOTRON_CUDA_GRAPHS=log $bin run -m $demo -p "$quote" -n 64 --temp 0 --ignore-eos \
            --device cuda $spec >"$log/rehearse.out" 2>"$log/rehearse.log" || return 1
        cmp "$log/rehearse.plain" "$log/rehearse.out" || { echo "$spec: output differs"; return 1; }
        ! grep -E "differs|declined" "$log/rehearse.log" || return 1
        n=$((n + $(grep -c "^cuda graph: rehearsed" "$log/rehearse.log")))
    done
    [ $n -ge 3 ] && echo "$n kinds rehearsed, outputs identical"
}
check rehearsal rehearsal_same

# 3c. a real GGUF (llama.cpp's Q4_K_M of the demo model: ../shared/data/gguf, or $NT_GGUF_FILE):
#     CUDA against the CPU, held as the packed mix is (its block types quantize the activations
#     alike: at most PACKED_SHARE of the quantization's own difference from the demo's bf16
#     logits), 64 greedy tokens equal, and its lossless .nemo gives the .gguf's CUDA logits bit for bit
gguf_same() { # gguf_same FILE
    local ids="1170,290,2281,43,299,319,290,1061,300,290,982,43,299,456,290,1649"
    $bin logits -m $demo --tokens "$ids" -o "$log/gguf.float.npy" &&
        $bin logits -m "$1" --tokens "$ids" -o "$log/gguf.cpu.npy" &&
        $bin logits -m "$1" --tokens "$ids" -o "$log/gguf.cuda.npy" --device cuda &&
        python3 tests/gpu/compare.py gguf "$log/gguf.cpu.npy" "$log/gguf.cuda.npy" $PACKED_SHARE "$log/gguf.float.npy" &&
        $bin convert "$1" -o "$log/gguf.nemo" &&
        $bin logits -m "$log/gguf.nemo" --tokens "$ids" -o "$log/gguf.nemo.npy" --device cuda &&
        cmp "$log/gguf.cuda.npy" "$log/gguf.nemo.npy" &&
        $bin generate -m "$1" --tokens $prompt -n 64 --ignore-eos >"$log/gguf.greedy.cpu" &&
        $bin generate -m "$1" --tokens $prompt -n 64 --ignore-eos --device cuda >"$log/gguf.greedy.cuda" &&
        cmp <(head -1 "$log/gguf.greedy.cpu") <(head -1 "$log/gguf.greedy.cuda") &&
        echo "logits within the packed share, .nemo = .gguf on CUDA, 64 greedy tokens identical"
}
gguf_file=${NT_GGUF_FILE:-../shared/data/gguf/kjv-Q4_K_M.gguf}
if [ -f "$gguf_file" ]; then
    check gguf-real gguf_same "$gguf_file"
else
    results+=("SKIP  gguf-real  $gguf_file not here (NT_GGUF_FILE names it)")
    echo "${results[-1]}"
fi

# 4. within CUDA: a prompt in one pass of 64 against 64 passes of one
text_ids=$(python3 -c "import json; d=json.load(open('tests/fixtures/demo/reference.json')); print(','.join(map(str, d['logits_ids'][:64])))" 2>/dev/null || echo "")
[ -n "$text_ids" ] || text_ids=$(python3 -c "print(','.join(str((i*7919)%4000+10) for i in range(64)))")
passes_same() { # passes_same MODEL NAME
    $bin logits -m "$1" --tokens "$text_ids" -o "$log/$2.p64.npy" --device cuda --pass 64 &&
        $bin logits -m "$1" --tokens "$text_ids" -o "$log/$2.p1.npy" --device cuda --pass 1 &&
        $bin logits -m "$1" --tokens "$text_ids" -o "$log/$2.p7.npy" --device cuda --pass 7 &&
        python3 tests/gpu/compare.py "$2 pass 64 vs 1" "$log/$2.p1.npy" "$log/$2.p64.npy" 1e-6 &&
        python3 tests/gpu/compare.py "$2 pass 7 vs 1" "$log/$2.p1.npy" "$log/$2.p7.npy" 1e-6 &&
        $bin generate -m "$1" --tokens "$text_ids" -n 32 --ignore-eos --device cuda --pass 64 >"$log/$2.g64" &&
        $bin generate -m "$1" --tokens "$text_ids" -n 32 --ignore-eos --device cuda --pass 1 >"$log/$2.g1" &&
        cmp <(head -1 "$log/$2.g64") <(head -1 "$log/$2.g1") && echo "greedy identical after prefill vs decode-only"
}
check passes-demo-bf16 passes_same $demo demo-bf16
check passes-demo-packed passes_same "$log/demo.nemo" demo-packed

# 5. compute-sanitizer on the demo model (a prompt pass and a few decode passes)
if command -v compute-sanitizer >/dev/null; then
    for tool in memcheck racecheck; do
        check "sanitizer-$tool" compute-sanitizer --tool $tool --error-exitcode 9 \
            $bin generate -m "$log/demo.nemo" --tokens $prompt,300,290,1649 -n 4 --device cuda --pass 3
    done
fi

fi # checks

# 6. speed on a synthetic Nemotron-3-Nano-30B-A3B (default mix)
if [ $bench = 1 ]; then
    nano=/tmp/nano-default.nemo
    [ -f $nano ] || check synth-nano $bin synth --shape nemotron-3-nano-30b-a3b -o $nano
    for p in 420 2048; do
        check "bench-nano-p$p" $bin bench -m $nano --device cuda -p $p -n 128 -r 3
        cat "$log/bench-nano-p$p.log"
    done
    # the pass size for prompts: 2048 positions in passes of 128 .. 1024 (the default is 512)
    for pass in 128 256 1024; do
        check "bench-nano-p2048-pass$pass" $bin bench -m $nano --device cuda -p 2048 -n 16 -r 2 --pass $pass
        cat "$log/bench-nano-p2048-pass$pass.log"
    done
    # verify passes of K drafted positions against K plain decode steps (issue 14)
    check bench-nano-verify $bin bench -m $nano --device cuda -p 64 -n 32 -r 2 --verify 1,2,4,8,12,16
    cat "$log/bench-nano-verify.log"
    # each heavy operation alone at Nano's shapes (graph replays): time, GB/s, Tops/s
    [ -x build/bin/gpu_bench_ops ] && build/bin/gpu_bench_ops 2>&1 | tee "$log/bench-ops.log"
    # where the time goes: every operation of eager passes timed (a 64-position pass, decode)
    NEMOTRON_CUDA_PROFILE=1 $bin bench -m $nano --device cuda -p 64 -n 8 -r 1 >"$log/profile.log" 2>&1
    head -40 "$log/profile.log"
fi

(cd "$log" && tar czf "$out/logs.tgz" ./*.log)
[ -f "$log/ops.log" ] && grep -a "FAIL" "$log/ops.log" | head -20
echo
echo "== summary =="
printf '%s\n' "${results[@]}" | tee "$out/summary.txt"
if [ $failed = 0 ] && [ $checks = 1 ]; then
    {
        echo "# tests/gpu/VERIFIED - written by tests/gpu/run.sh: these CUDA sources passed every check on a GPU."
        echo "# scripts/gpu-verified.sh (run by .ci/run) compares the tree against it."
        echo "sources-sha256: $sources"
        echo "gpu: $(head -1 "$log/gpu.txt")"
        echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
        echo "run: tests/gpu/run.sh$([ $bench = 1 ] && echo " --bench")"
        echo "summary:"
        printf '  %s\n' "${results[@]}"
        echo "files:"
        scripts/gpu-verified.sh --list
        echo "end files"
    } >tests/gpu/VERIFIED
    cp tests/gpu/VERIFIED "$out/VERIFIED"
fi
[ $failed = 0 ] && echo "all GPU checks passed" || echo "some GPU checks FAILED"
exit $failed
