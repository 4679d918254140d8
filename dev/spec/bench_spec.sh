#!/usr/bin/env bash
# bench_spec.sh - speculative decoding against plain decoding on the demo model, on the CPU: the
# figures of docs/PERF.md, "Speculative decoding, demo model, CPU".
#
# usage (from the repository root): bash dev/spec/bench_spec.sh [ROUNDS] [THREADS]
#        DEVICE=cuda bash dev/spec/bench_spec.sh ...   (the backend: cpu by default)
#        NGEN=2048 bash dev/spec/bench_spec.sh ...   (tokens generated per run: 256 by default)
#        BIN=/path/to/nemotron bash dev/spec/bench_spec.sh ...   (another build, e.g. to compare
#        two commits in alternating calls; build/nemotron by default)
#
# Three prompts, greedy (--temp 0), NGEN generated tokens (--ignore-eos):
#   quote1: a passage of Genesis 1 (5 verses), then its first words again (115 tokens);
#   quote3: the passage three times, then its first words (328 tokens). The demo model (7.3 M
#          parameters) copies from its context only once it has seen the passage repeat: after
#          one copy it drifts within a few words, after three it quotes most of it again, which
#          n-gram prompt lookup drafts;
#   plain: "In the beginning God created": a plain continuation, for the draft model ($DRAFT:
#          models/nemotron-h-kjv-draft, the 2.4 M-parameter draft trained on the same text with the
#          same tokenizer; DRAFT=models/nemotron-h-kjv makes the demo draft for itself: every draft
#          right, the bound on acceptance, not on speed)
#          and for the n-gram drafter where it has little to find; and the model's own MTP step
#          (--spec mtp, every prompt) when the model has one.
# The methods run in turn within each round (the machine is shared: alternating spreads a busy
# moment over all of them), and every run's output is compared with plain decoding's. Prints one
# line per run (method, prompt, generated tokens/s, drafted, accepted, the prompt's tokens and
# tokens/s) and a summary: the range of generated tokens/s per method and prompt, the ratios to
# plain decoding of the generated tokens/s and of the whole run's time (prompt and generation:
# work a method does before its first token, e.g. recording pass programs, counts there), and the
# acceptance.
set -u
cd "$(dirname "$0")/../.." || exit 1
rounds=${1:-5}
threads=${2:-1}
ngen=${NGEN:-256}
device=${DEVICE:-cpu}
bin=${BIN:-build/nemotron}
model=models/nemotron-h-kjv
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passage="In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. And God said, Let there be light: and there was light. And God saw the light, that it was good: and God divided the light from the darkness. And God called the light Day, and the darkness he called Night. And the evening and the morning were the first day."
start="In the beginning God created the heaven"
quote1="$passage
$start"
quote3="$passage
$passage
$passage
$start"
plain="In the beginning God created"
methods=("plain" "ngram" "draft")
# the MTP step where the model has one (config.json's num_nextn_predict_layers)
grep -q '"num_nextn_predict_layers": *[1-9]' "$model/config.json" && methods+=("mtp")
opts_plain=()
opts_ngram=(--spec ngram)
opts_mtp=(--spec mtp)
draft=${DRAFT:-models/nemotron-h-kjv-draft}
opts_draft=(--draft-model "$draft")
for r in $(seq "$rounds"); do
    for prompt_name in quote1 quote3 plain; do
        prompt=${!prompt_name}
        for m in "${methods[@]}"; do
            [ "$m" = draft ] && [ "$prompt_name" != plain ] && continue
            eval "opts=(\"\${opts_$m[@]}\")"
            "$bin" run -m "$model" -p "$prompt" -n "$ngen" --temp 0 --ignore-eos -t "$threads" --device "$device" "${opts[@]}" \
                >"$work/$prompt_name.$m.out" 2>"$work/err"
            rate=$(sed -n 's/.*generated [0-9]* tokens: \([0-9.]*\) tokens\/s.*/\1/p' "$work/err" | head -1)
            prompt_tokens=$(sed -n 's/.*prompt \([0-9]*\) tokens: [0-9.]* tokens\/s.*/\1/p' "$work/err" | head -1)
            prompt_rate=$(sed -n 's/.*prompt [0-9]* tokens: \([0-9.]*\) tokens\/s.*/\1/p' "$work/err" | head -1)
            drafted=$(sed -n 's/.*drafted \([0-9]*\),.*/\1/p' "$work/err")
            accepted=$(sed -n 's/.*accepted \([0-9]*\) .*/\1/p' "$work/err")
            same=same
            cmp -s "$work/$prompt_name.$m.out" "$work/$prompt_name.plain.out" || same=DIFFERENT
            echo "round $r $m $prompt_name ${rate} tokens/s drafted ${drafted:--} accepted ${accepted:--} output $same" \
                "prompt ${prompt_tokens:-0} at ${prompt_rate:-0}"
        done
    done
done | tee "$work/runs"
echo "summary over $rounds rounds, -n $ngen, -t $threads, --device $device: generated tokens/s min .. median .. max;" \
    "the median of each round's ratio to plain decoding of the same prompt, of the generated tokens/s and of the" \
    "whole run's (prompt and generation: plain's seconds over the method's); acceptance"
python3 - "$work/runs" "$ngen" <<'PY'
import statistics, sys
runs = [l.split() for l in open(sys.argv[1])]
rate, whole, drafted, accepted = {}, {}, {}, {}
for f in runs:
    key = (f[2], f[3])
    rate.setdefault(key, {})[int(f[1])] = float(f[4])
    prompt_tokens, prompt_rate = int(f[13]), float(f[15])
    seconds = (prompt_tokens / prompt_rate if prompt_rate > 0 else 0) + int(sys.argv[2]) / float(f[4])
    whole.setdefault(key, {})[int(f[1])] = seconds
    if f[7] != "-":
        drafted[key] = drafted.get(key, 0) + int(f[7])
        accepted[key] = accepted.get(key, 0) + int(f[9])
for key in sorted(rate):
    r = sorted(rate[key].values())
    base = rate.get(("plain", key[1]), {})
    ratios = [rate[key][i] / base[i] for i in rate[key] if i in base]
    base_s = whole.get(("plain", key[1]), {})
    whole_ratios = [base_s[i] / whole[key][i] for i in whole[key] if i in base_s]
    acc = "%.1f %% (%d of %d)" % (100 * accepted[key] / drafted[key], accepted[key], drafted[key]) if drafted.get(key) else "-"
    print("  %-6s %-7s %7.0f .. %7.0f .. %7.0f   x%.2f  whole run x%.2f   %s" % (key[0], key[1], r[0],
          statistics.median(r), r[-1], statistics.median(ratios), statistics.median(whole_ratios), acc))
PY
