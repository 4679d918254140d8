#!/usr/bin/env bash
# test_spec_cli.sh - speculative decoding from the command line (--spec ngram, --spec-max K,
# --draft-model MODEL) on the bundled model (models/nemotron-h-kjv):
#   - generate prints the ids plain greedy decoding prints, with --spec ngram at several K and
#     with the model drafting for itself (every draft right: accepted == drafted);
#   - run --temp 0 and run --temp 0.8 --seed 7 print byte for byte the plain run's text, with
#     n-gram drafts (K 1, 3, 16, 64) and with a draft model; a prompt that repeats a line gets
#     drafts accepted; the run ends with the counts line on stderr;
#   - a two-turn chat answers as without speculation;
#   - --spec mtp on tests/fixtures/latent-mtp-f32 (the one model with MTP layers; random weights,
#     so its drafts rarely land and the rejecting verify steps are what runs): generate's ids, run's
#     text greedy and seeded, and a chat turn are plain decoding's;
#   - bad values (--spec foo, --spec-max 0 and 65, --spec-max without a drafter, both drafters
#     (--spec ngram or mtp with --draft-model), --spec mtp on models without MTP layers, --spec
#     on a command without generation, --spec-max past --pass, a draft model with another
#     vocabulary) exit non-zero with a message naming the problem.
# usage (from the repository root): bash tests/cli/test_spec_cli.sh build/nemotron
set -u
cd "$(dirname "$0")/../.." || exit 1
bin=${1:-build/nemotron}
model=models/nemotron-h-kjv
# make_model is built in the release directory only; an ASan run of this script uses it too
make_model="$(dirname "$bin")/make_model"
[ -x "$make_model" ] || make_model=build/make_model
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
suite=spec-cli
. tests/cli/checks.sh
# one thread: the machine running the suite may be busy, and a team of spinning threads then
# waits for a core far longer than the work takes
nt() { "$bin" "$@" -t 1; }

same() { # same DESCRIPTION FILE_A FILE_B: byte-identical files
    check "$1: $(cmp "$2" "$3" 2>&1 | head -1)" cmp -s "$2" "$3"
}
# accepted COUNTS_FILE: the accepted count of the speculation line
accepted() { sed -n 's/.*accepted \([0-9]*\) .*/\1/p' "$1" | tail -1; }
drafted() { sed -n 's/.*drafted \([0-9]*\),.*/\1/p' "$1" | tail -1; }

# ---- generate: greedy ids ----
ids=1,450,300,900,77,12,99,450,300,900
nt generate -m "$model" --tokens $ids -n 80 --ignore-eos >"$work/plain.ids" 2>"$work/plain.err"
check "plain generate printed ids" grep -qE '^[0-9]+(,[0-9]+){79}$' "$work/plain.ids"
for k in 1 2 5 16 64; do
    nt generate -m "$model" --tokens $ids -n 80 --ignore-eos --spec ngram --spec-max $k \
        >"$work/spec.ids" 2>"$work/spec.err"
    same "generate --spec ngram --spec-max $k" "$work/plain.ids" "$work/spec.ids"
    check "generate --spec-max $k: the counts line" grep -qE "^\[speculative \(ngram, --spec-max $k\): drafted [0-9]+, accepted [0-9]+ \([0-9.]+ %\); [0-9]+ passes for 80 tokens: [0-9.]+ tokens/s\]$" "$work/spec.err"
done
nt generate -m "$model" --tokens $ids -n 80 --ignore-eos --draft-model "$model" --spec-max 7 \
    >"$work/draft.ids" 2>"$work/draft.err"
same "generate --draft-model (the model itself)" "$work/plain.ids" "$work/draft.ids"
d=$(drafted "$work/draft.err") a=$(accepted "$work/draft.err")
check "the model drafting for itself: every draft accepted (drafted '$d', accepted '$a')" \
    test -n "$d" -a "$d" -gt 0 -a "$d" = "$a"

# ---- run: text, greedy and sampled ----
passage="In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters."
prompt="$passage
$passage
$passage
In the beginning God created"
for sampling in "--temp 0" "--temp 0.8 --seed 7"; do
    # shellcheck disable=SC2086 # the sampling options are words
    nt run -m "$model" -p "$prompt" -n 120 $sampling >"$work/plain.txt" 2>"$work/plain.err"
    check "plain run ($sampling) printed the prompt and more" test "$(wc -c <"$work/plain.txt")" -gt "${#prompt}"
    for spec in "--spec ngram --spec-max 1" "--spec ngram --spec-max 3" "--spec ngram" "--spec ngram --spec-max 64" \
        "--draft-model $model --spec-max 4"; do
        # shellcheck disable=SC2086
        nt run -m "$model" -p "$prompt" -n 120 $sampling $spec >"$work/spec.txt" 2>"$work/spec.err"
        same "run $sampling $spec" "$work/plain.txt" "$work/spec.txt"
        check "run $sampling $spec: the counts line" grep -q '^\[speculative (.*accepted [0-9]* (.*tokens/s\]$' "$work/spec.err"
    done
done
# (the model quotes a repeated line at once; its first verify steps come before the decoder's pay
# check, which may switch speculation off on a busy or compute-bound machine, so the count does
# not depend on the clock)
line="In the beginning God created the heaven and the earth."
nt run -m "$model" -p "$line
$line
$line
In the beginning God" -n 60 --temp 0 --spec ngram >/dev/null 2>"$work/ngram.err"
a=$(accepted "$work/ngram.err")
check "a prompt that repeats a line: n-gram drafts accepted ('$a')" test -n "$a" -a "${a:-0}" -gt 0
# --ctx shorter than the run: both stop at the full context, with the same text
nt run -m "$model" -p "$passage" -n 200 --temp 0 -c 64 >"$work/plain.txt" 2>/dev/null
nt run -m "$model" -p "$passage" -n 200 --temp 0 -c 64 --spec ngram >"$work/spec.txt" 2>"$work/spec.err"
same "run -c 64 (the context fills)" "$work/plain.txt" "$work/spec.txt"
check "run -c 64 --spec ngram: the full context is said" grep -q 'context of 64 positions is full' "$work/spec.err"

# ---- chat: two turns ----
printf 'Who begat Enos?\nAnd then?\n' | nt chat -m "$model" --temp 0 --no-think -n 40 >"$work/plain.chat" 2>/dev/null
printf 'Who begat Enos?\nAnd then?\n' | nt chat -m "$model" --temp 0 --no-think -n 40 --spec ngram \
    >"$work/spec.chat" 2>"$work/spec.err"
same "chat --spec ngram, two turns" "$work/plain.chat" "$work/spec.chat"
check "chat: a counts line per turn" test "$(grep -c '^\[speculative' "$work/spec.err")" -eq 2

# ---- --spec mtp: the model's MTP step drafts ----
mtp_model "$work/mtp" || check "mtp_model made the MTP fixture a tokenizer" false
ids=1,45,300,90,77,12,99,45,300,90 # the fixture's vocabulary has 384 ids
nt generate -m "$work/mtp" --tokens $ids -n 60 --ignore-eos >"$work/plain.ids" 2>/dev/null
check "plain generate on the MTP fixture printed ids" grep -qE '^[0-9]+(,[0-9]+){59}$' "$work/plain.ids"
for k in 1 4 16; do
    nt generate -m "$work/mtp" --tokens $ids -n 60 --ignore-eos --spec mtp --spec-max $k >"$work/spec.ids" 2>"$work/spec.err"
    same "generate --spec mtp --spec-max $k" "$work/plain.ids" "$work/spec.ids"
    check "generate --spec mtp --spec-max $k: the counts line" grep -qE "^\[speculative \(mtp, --spec-max $k\): drafted [0-9]+, accepted [0-9]+ .*; [0-9]+ passes for 60 tokens" "$work/spec.err"
done
d=$(drafted "$work/spec.err")
check "generate --spec mtp: the MTP step drafted ('$d')" test -n "$d" -a "${d:-0}" -gt 0
for sampling in "--temp 0" "--temp 0.8 --seed 7"; do
    # shellcheck disable=SC2086 # the sampling options are words
    nt run -m "$work/mtp" -p "$line" -n 60 $sampling >"$work/plain.txt" 2>/dev/null
    # shellcheck disable=SC2086
    nt run -m "$work/mtp" -p "$line" -n 60 $sampling --spec mtp --spec-max 4 >"$work/spec.txt" 2>"$work/spec.err"
    same "run $sampling --spec mtp on the MTP fixture" "$work/plain.txt" "$work/spec.txt"
    check "run $sampling --spec mtp: the counts line" grep -q '^\[speculative (mtp, --spec-max 4): drafted' "$work/spec.err"
done
printf 'Who begat Enos?\n' | nt chat -m "$work/mtp" --temp 0 --no-think -n 30 >"$work/plain.chat" 2>/dev/null
printf 'Who begat Enos?\n' | nt chat -m "$work/mtp" --temp 0 --no-think -n 30 --spec mtp >"$work/spec.chat" 2>"$work/spec.err"
same "chat --spec mtp on the MTP fixture" "$work/plain.chat" "$work/spec.chat"

# ---- bad values ----
expect_fail() { # expect_fail DESCRIPTION PATTERN ARGS...: non-zero exit, PATTERN on stderr
    local what=$1 pattern=$2
    shift 2
    "$bin" "$@" >"$work/out" 2>"$work/err" </dev/null
    local rc=$?
    check "$what: exit $rc, expected non-zero" test "$rc" -ne 0
    check "$what: '$pattern' not in: $(grep -v '^nemotron: seed' "$work/err" | head -1)" grep -q -- "$pattern" "$work/err"
}
expect_fail "--spec foo" "spec 'foo'" generate -m "$model" --tokens 1,2 --spec foo
expect_fail "--spec-max 0" "spec-max: '0'" generate -m "$model" --tokens 1,2 --spec ngram --spec-max 0
expect_fail "--spec-max 65" "spec-max: '65'" generate -m "$model" --tokens 1,2 --spec ngram --spec-max 65
expect_fail "--spec-max without a drafter" "speculation is off" run -m "$model" -p hi --spec-max 4
expect_fail "both drafters" "one drafter at a time" run -m "$model" -p hi --spec ngram --draft-model "$model"
expect_fail "--spec mtp and --draft-model" "spec mtp and --draft-model: one drafter at a time" \
    run -m "$work/mtp" -p hi --spec mtp --draft-model "$work/mtp"
expect_fail "--spec mtp on the draft model (no MTP layers)" "spec mtp: the model models/nemotron-h-kjv-draft has no MTP layers" \
    run -m models/nemotron-h-kjv-draft -p hi --spec mtp
expect_fail "generate --spec mtp on a fixture without MTP layers" "has no MTP layers" \
    generate -m tests/fixtures/hybrid-group-f32 --tokens 1,2 --spec mtp
check "--spec mtp without MTP layers: nothing printed" test ! -s "$work/out"
expect_fail "--spec on logits" "does not apply to 'logits'" logits -m "$model" --tokens 1 -o "$work/x.npy" --spec ngram
expect_fail "--spec on bench" "does not apply to 'bench'" bench -m "$model" --spec ngram
expect_fail "--spec-max past --pass" "more than --pass 4" run -m "$model" -p hi --spec ngram --pass 4
expect_fail "--draft-model that does not exist" "draft-model $work/none" run -m "$model" -p hi --draft-model "$work/none"
if "$make_model" "$work/tiny" --shape tiny --seed 3 >"$work/make.log" 2>&1; then
    expect_fail "a draft model with another vocabulary" "vocabulary has 256 tokens, the model's 4096" \
        run -m "$model" -p hi --draft-model "$work/tiny"
    check "a refused draft model: nothing printed" test ! -s "$work/out"
    expect_fail "generate: a draft model with another vocabulary" "vocabulary has 256 tokens" \
        generate -m "$model" --tokens 1,2 --draft-model "$work/tiny"
else
    check "make_model: $(cat "$work/make.log")" false
fi

checks_summary
