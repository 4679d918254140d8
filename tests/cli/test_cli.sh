#!/usr/bin/env bash
# test_cli.sh - the `nemotron` command end to end, on a random tiny model.
#
# usage (from the repository root, as tests/run.sh does): bash tests/cli/test_cli.sh build/nemotron
#
# Writes a tiny model (vocab 256) with make_model into a mktemp directory, then checks that
#   - `logits` exits 0 and writes a valid float32 .npy: magic, version 1.0, a header that says
#     '<f4', C order and shape (3, 256), padded so the data starts at a multiple of 64, and a
#     file of exactly header + 3 x 256 x 4 bytes;
#   - `generate -n 5 --ignore-eos` prints 5 comma-separated ids in [0, 256), the first being the
#     argmax of the last row that `logits` wrote;
#   - bad input (unknown command or option, missing -m or --tokens, malformed token lists, a
#     token outside the vocabulary, -n abc, --pass 1025, a model directory that does not exist,
#     a truncated model, an output directory that does not exist) exits non-zero with a
#     message on stderr naming the problem, and leaves no output file and no temporary file,
#     and an OUT.npy that was there before untouched;
#   - output to a full device (/dev/full) exits non-zero with a message, never 0;
#   - -o refuses a device (/dev/null stays a device) and an input of the command (the model's
#     config.json, convert onto its own model.safetensors), follows a symbolic link and refuses
#     one that names nothing.
# Needs only coreutils (od, stat, truncate, head, tail) and grep: there is no numpy here.
# Prints one summary line and exits non-zero when a check failed.
set -u
cd "$(dirname "$0")/../.." || exit 1

bin=${1:-build/nemotron}
# make_model is built in the release directory only; an ASan run of this script uses it too.
make_model="$(dirname "$bin")/make_model"
[ -x "$make_model" ] || make_model=build/make_model

checks=0
failed=0
VOCAB=256

pass() { checks=$((checks + 1)); }
fail() {
    checks=$((checks + 1))
    failed=$((failed + 1))
    echo "FAIL cli: $*" >&2
}
check() { # check DESCRIPTION COMMAND...: passes when the command succeeds
    local what=$1
    shift
    if "$@"; then pass; else fail "$what"; fi
}

summary() {
    printf '%-28s %d checks, %d failed\n' cli "$checks" "$failed"
    [ "$checks" -gt 0 ] || echo "FAIL cli: no check ran" >&2
    [ "$failed" -eq 0 ] && [ "$checks" -gt 0 ]
}

if [ ! -x "$bin" ]; then
    fail "$bin is not an executable (run: make build/nemotron)"
    summary
    exit 1
fi
if [ ! -x "$make_model" ]; then
    fail "$make_model is not an executable (run: make build/make_model)"
    summary
    exit 1
fi

work=$(mktemp -d /tmp/nemotron-test-cli.XXXXXX)
trap 'rm -rf "$work"' EXIT
model=$work/tiny
out=$work/out
mkdir -p "$out"

if ! "$make_model" "$model" --shape tiny --dtype bf16 --seed 7 >"$work/make.log" 2>&1; then
    fail "make_model: $(cat "$work/make.log")"
    summary
    exit 1
fi
pass

# ------------------------------------------------------------------------------------------
# logits: a valid .npy

npy=$out/OUT.npy
if "$bin" logits -m "$model" --tokens 1,2,3 -o "$npy" >"$work/stdout" 2>"$work/stderr"; then
    pass
else
    fail "logits exited $?: $(cat "$work/stderr")"
fi

header_ok=0
if [ -f "$npy" ]; then
    pass
    magic=$(od -An -tx1 -N 8 "$npy" | tr -s ' ' | sed 's/^ //; s/ $//')
    check "npy magic and version: '$magic'" test "$magic" = "93 4e 55 4d 50 59 01 00"
    hl=$(od -An -tu2 -j 8 -N 2 "$npy" | tr -d ' ')
    header=$(head -c $((10 + hl)) "$npy" | tail -c "$hl")
    check "npy header has '<f4': $header" grep -qF "'descr': '<f4'" <<<"$header"
    check "npy header is C order: $header" grep -qF "'fortran_order': False" <<<"$header"
    check "npy header shape (3, $VOCAB): $header" grep -qF "'shape': (3, $VOCAB)" <<<"$header"
    check "npy header ends with a newline" test "$(od -An -tx1 -j $((10 + hl - 1)) -N 1 "$npy" | tr -d ' ')" = 0a
    check "npy data starts at a multiple of 64 ($((10 + hl)))" test $(((10 + hl) % 64)) -eq 0
    size=$(stat -c %s "$npy")
    check "npy size $size = $((10 + hl)) + 3 x $VOCAB x 4" test "$size" -eq $((10 + hl + 3 * VOCAB * 4))
    header_ok=1
else
    fail "logits wrote no $npy"
fi
check "logits leaves only OUT.npy in its directory: $(ls -A "$out")" test "$(ls -A "$out")" = OUT.npy

# the argmax of the last row, read as floats with od
last_argmax=-1
if [ "$header_ok" -eq 1 ]; then
    last_argmax=$(od -An -v -tf4 -j $((10 + hl + 2 * VOCAB * 4)) -N $((VOCAB * 4)) "$npy" |
        awk '{ for (i = 1; i <= NF; i++) { if (n == 0 || $i > best) { best = $i; arg = n } n++ } }
             END { if (n == '"$VOCAB"') print arg; else print -1 }')
    check "last logits row has $VOCAB floats" test "$last_argmax" -ge 0
    finite=$(od -An -v -tf4 -j $((10 + hl)) "$npy" | grep -ciE 'nan|inf')
    check "logits are finite ($finite non-finite lines)" test "$finite" -eq 0
fi

# ------------------------------------------------------------------------------------------
# generate: 5 comma-separated ids

if ids=$("$bin" generate -m "$model" --tokens 1,2,3 -n 5 --ignore-eos 2>"$work/stderr"); then
    pass
else
    fail "generate exited non-zero: $(cat "$work/stderr")"
fi
check "generate prints 5 comma-separated ids: '$ids'" grep -qE '^[0-9]+(,[0-9]+){4}$' <<<"$ids"
in_vocab=1
IFS=, read -r -a id_list <<<"$ids"
for id in "${id_list[@]}"; do
    [[ "$id" =~ ^[0-9]+$ ]] && [ "$id" -lt "$VOCAB" ] || in_vocab=0
done
check "generated ids are in [0, $VOCAB): $ids" test "$in_vocab" -eq 1
check "the first generated id (${id_list[0]:-none}) is the argmax of the last logits row ($last_argmax)" \
    test "${id_list[0]:-x}" = "$last_argmax"
ids2=$("$bin" generate -m "$model" --tokens 1,2,3 -n 5 --ignore-eos --pass 1 2>/dev/null)
check "generate with --pass 1 gives the same ids: '$ids2' vs '$ids'" test "$ids2" = "$ids"

# the MoE experts are shared out over threads: a smaller team than asked for (OMP_THREAD_LIMIT)
# and one thread must give the very same tokens as two
fx=tests/fixtures/hybrid-group-f32
ids_t2=$("$bin" generate -m "$fx" --tokens 5,9,33,2,71 -n 8 --ignore-eos -t 2 2>/dev/null)
ids_t1=$("$bin" generate -m "$fx" --tokens 5,9,33,2,71 -n 8 --ignore-eos -t 1 2>/dev/null)
ids_lim=$(OMP_THREAD_LIMIT=1 "$bin" generate -m "$fx" --tokens 5,9,33,2,71 -n 8 --ignore-eos -t 2 2>/dev/null)
check "MoE: -t 1 gives the ids of -t 2: '$ids_t1' vs '$ids_t2'" test -n "$ids_t2" -a "$ids_t1" = "$ids_t2"
check "MoE: OMP_THREAD_LIMIT=1 with -t 2 gives the same ids: '$ids_lim'" test "$ids_lim" = "$ids_t2"

# generate refuses up front when --ctx cannot hold the run, printing no ids
gen_out=$("$bin" generate -m "$model" --tokens 1,2 --ctx 3 -n 5 --ignore-eos 2>"$work/stderr")
rc=$?
check "generate past --ctx: exit $rc, expected 2" test "$rc" -eq 2
check "generate past --ctx: printed nothing: '$gen_out'" test -z "$gen_out"
check "generate past --ctx: says why" grep -q "need a context of" "$work/stderr"

check "version exits 0" "$bin" version >/dev/null
check "--help exits 0" "$bin" --help >/dev/null

# ------------------------------------------------------------------------------------------
# bad input: non-zero exit, a message naming the problem, no output file left

# expect_fail DESCRIPTION NEEDLE ARGS...: runs the command in an empty output directory
expect_fail() {
    local what=$1 needle=$2
    shift 2
    rm -rf "$out"
    mkdir -p "$out"
    "$bin" "$@" >"$work/stdout" 2>"$work/stderr"
    local rc=$?
    check "$what: exit status $rc, expected non-zero" test "$rc" -ne 0
    check "$what: stderr lacks '$needle': $(head -c 300 "$work/stderr")" grep -qF -- "$needle" "$work/stderr"
    check "$what: left files behind: $(ls -A "$out" | tr '\n' ' ')" test -z "$(ls -A "$out")"
}

o=$out/OUT.npy
expect_fail "unknown command" "unknown command 'frobnicate'" frobnicate -m "$model" --tokens 1 -o "$o"
expect_fail "no command" "no command" 
expect_fail "unknown option" "unknown option '--frobnicate'" logits -m "$model" --tokens 1 -o "$o" --frobnicate
expect_fail "option without its value" "-m" logits --tokens 1 -o "$o" -m
expect_fail "missing -m" "-m MODEL is required" logits --tokens 1,2 -o "$o"
expect_fail "missing --tokens" "--tokens" logits -m "$model" -o "$o"
expect_fail "missing -o" "-o" logits -m "$model" --tokens 1
expect_fail "--tokens 1,,2" "item 2" logits -m "$model" --tokens 1,,2 -o "$o"
expect_fail "--tokens 1,2," "item 3" logits -m "$model" --tokens 1,2, -o "$o"
expect_fail "--tokens ''" "--tokens" logits -m "$model" --tokens "" -o "$o"
expect_fail "--tokens abc" "'abc'" logits -m "$model" --tokens abc -o "$o"
expect_fail "--tokens -1" "'-1'" logits -m "$model" --tokens -1 -o "$o"
expect_fail "--tokens 1.5" "'1.5'" logits -m "$model" --tokens 1.5 -o "$o"
expect_fail "--tokens 99999999999" "99999999999" logits -m "$model" --tokens 1,99999999999 -o "$o"
expect_fail "token = vocab" "outside the vocabulary" logits -m "$model" --tokens 1,$VOCAB -o "$o"
expect_fail "token = vocab (generate)" "outside the vocabulary" generate -m "$model" --tokens $VOCAB -n 2
expect_fail "-n abc" "-n" generate -m "$model" --tokens 1 -n abc
expect_fail "-n -1" "-n" generate -m "$model" --tokens 1 -n -1
expect_fail "--pass 1025" "--pass" logits -m "$model" --tokens 1 --pass 1025 -o "$o"
expect_fail "--pass 0" "--pass" logits -m "$model" --tokens 1 --pass 0 -o "$o"
expect_fail "--ctx too small" "context" logits -m "$model" --tokens 1,2,3 --ctx 2 -o "$o"
expect_fail "model dir does not exist" "$work/no-such-model" logits -m "$work/no-such-model" --tokens 1 -o "$o"
expect_fail "model path is a file" "not a directory" logits -m "$model/config.json" --tokens 1 -o "$o"

broken=$work/truncated
cp -r "$model" "$broken"
truncate -s -100 "$broken/model.safetensors"
expect_fail "truncated model" "truncated" logits -m "$broken" --tokens 1,2 -o "$o"
expect_fail "truncated model (generate)" "truncated" generate -m "$broken" --tokens 1,2 -n 3

nocfg=$work/noconfig
cp -r "$model" "$nocfg"
rm "$nocfg/config.json"
expect_fail "model without config.json" "config.json" logits -m "$nocfg" --tokens 1 -o "$o"

# the output directory does not exist: the write fails, naming the file
rm -rf "$out"
mkdir -p "$out"
"$bin" logits -m "$model" --tokens 1 -o "$out/missing-dir/OUT.npy" >/dev/null 2>"$work/stderr"
rc=$?
check "output dir missing: exit $rc, expected non-zero" test "$rc" -ne 0
check "output dir missing: stderr lacks the path: $(cat "$work/stderr")" grep -qF "$out/missing-dir/OUT.npy" "$work/stderr"
check "output dir missing: left files behind" test -z "$(ls -A "$out")"

# a failed run leaves an existing OUT.npy as it was
rm -rf "$out"
mkdir -p "$out"
echo sentinel >"$out/OUT.npy"
"$bin" logits -m "$model" --tokens 1,$VOCAB -o "$out/OUT.npy" >/dev/null 2>&1
check "failed run keeps an existing OUT.npy" test "$(cat "$out/OUT.npy")" = sentinel
check "failed run leaves no temporary file: $(ls -A "$out" | tr '\n' ' ')" test "$(ls -A "$out")" = OUT.npy

# -o: never over a device or an input; a symbolic link is followed, not replaced
"$bin" logits -m "$model" --tokens 1,2 -o /dev/null >/dev/null 2>"$work/stderr"
rc=$?
check "logits -o /dev/null: exit $rc, expected non-zero" test "$rc" -ne 0
check "logits -o /dev/null: the message says why: $(cat "$work/stderr")" grep -q "not a regular file" "$work/stderr"
check "/dev/null is still a device" test -c /dev/null
cp "$model/config.json" "$work/config.keep"
"$bin" logits -m "$model" --tokens 1,2 -o "$model/config.json" >/dev/null 2>"$work/stderr"
rc=$?
check "logits -o MODEL/config.json: exit $rc, expected non-zero" test "$rc" -ne 0
check "logits -o MODEL/config.json: the message names the input: $(cat "$work/stderr")" grep -q "is the input" "$work/stderr"
check "the model's config.json is untouched" cmp -s "$model/config.json" "$work/config.keep"
echo old >"$work/target.npy"
ln -s "$work/target.npy" "$work/link.npy"
check "logits -o LINK" "$bin" logits -m "$model" --tokens 1,2 -o "$work/link.npy" >/dev/null 2>&1
check "the link is still a link" test -L "$work/link.npy"
check "the file it names holds the .npy" test "$(head -c 6 "$work/target.npy" | od -An -c | tr -d ' ')" = "223NUMPY"
# a link to nothing is refused, as cp refuses to write through a dangling link
ln -s "$work/nowhere/x.npy" "$work/dangling.npy"
"$bin" logits -m "$model" --tokens 1,2 -o "$work/dangling.npy" >/dev/null 2>"$work/stderr"
rc=$?
check "logits -o a dangling link: exit $rc, expected non-zero" test "$rc" -ne 0
check "logits -o a dangling link: the message says so: $(cat "$work/stderr")" grep -q "a symbolic link to nothing" "$work/stderr"
check "the dangling link is still a link" test -L "$work/dangling.npy"
"$bin" convert "$model" -o "$model/model.safetensors" >/dev/null 2>"$work/stderr"
rc=$?
check "convert DIR -o DIR/model.safetensors: exit $rc, expected non-zero" test "$rc" -ne 0
check "convert onto its input: the message says so: $(cat "$work/stderr")" grep -q "is the input" "$work/stderr"

# output that cannot be written is a failure, not a silent exit 0
if [ -w /dev/full ]; then
    "$bin" generate -m "$model" --tokens 1,2,3 -n 2 --ignore-eos >/dev/full 2>"$work/stderr"
    rc=$?
    check "generate > /dev/full: exit $rc, expected non-zero" test "$rc" -ne 0
    check "generate > /dev/full: the message names the write: $(cat "$work/stderr")" \
        grep -q "writing the output failed" "$work/stderr"
    "$bin" version >/dev/full 2>/dev/null
    rc=$?
    check "version > /dev/full: exit $rc, expected non-zero" test "$rc" -ne 0
fi

# make_model's own errors: a message and status 2
expect_make_model_fail() { # DESCRIPTION ARGS...
    local what=$1
    shift
    "$make_model" "$@" >/dev/null 2>"$work/stderr"
    local rc=$?
    check "make_model $what: exit $rc, expected 2" test "$rc" -eq 2
    check "make_model $what: no message on stderr" test -s "$work/stderr"
}
expect_make_model_fail "without OUT_DIR"
expect_make_model_fail "two OUT_DIRs" "$work/mm1" "$work/mm2"
expect_make_model_fail "--shape nope" "$work/mm" --shape nope
expect_make_model_fail "--dtype q4" "$work/mm" --dtype q4
expect_make_model_fail "--seed x" "$work/mm" --seed x
expect_make_model_fail "--shards 0" "$work/mm" --shards 0
expect_make_model_fail "--shards without value" "$work/mm" --shards
expect_make_model_fail "parent dir missing" "$work/no/such/dir"

# gguf-info on a committed GGUF seed (tests/fuzz/corpus/gguf, written by make_corpus.sh), then on
# files it must refuse
seed=tests/fuzz/corpus/gguf/every-value
"$bin" gguf-info "$seed" >"$work/stdout" 2>"$work/stderr"
rc=$?
check "gguf-info $seed: exit $rc: $(cat "$work/stderr")" test "$rc" -eq 0
check "gguf-info: the architecture" grep -q '^architecture: nemotron_h_moe$' "$work/stdout"
check "gguf-info: the tensor table" grep -Eq '^  w\.mxfp4 +MXFP4 +\[32, 2, 2\] +68 ' "$work/stdout"
check "gguf-info: arrays summarized" grep -q 'tokenizer.ggml.tokens .*\[5 x string\] "<unk>", "<s>", "</s>", "a", \.\.\.' "$work/stdout"
"$bin" gguf-info -m "$seed" >/dev/null 2>&1
check "gguf-info -m FILE: exit 0" test "$?" -eq 0
"$bin" gguf-info "$model/config.json" >/dev/null 2>"$work/stderr"
rc=$?
check "gguf-info on a JSON file: exit $rc, expected 1" test "$rc" -eq 1
check "gguf-info on a JSON file: $(cat "$work/stderr")" grep -q 'not a GGUF file' "$work/stderr"
cp "$seed" "$work/m-00001-of-00003.gguf"   # named as a split's first part, without split keys
"$bin" gguf-info "$work/m-00001-of-00003.gguf" >/dev/null 2>"$work/stderr"
rc=$?
check "gguf-info on a split part: exit $rc, expected 1" test "$rc" -eq 1
check "gguf-info on a split part: $(cat "$work/stderr")" grep -q 'split keys say part -1 of -1, its name part 1 of 3' "$work/stderr"
"$bin" gguf-info >/dev/null 2>"$work/stderr"
rc=$?
check "gguf-info without a file: exit $rc, expected 2" test "$rc" -eq 2

summary
