#!/usr/bin/env bash
# test_text_cli.sh - the text commands end to end on the bundled model (models/nemotron-h-kjv):
#   - tokenize prints a JSON array and --decode gives the text back byte for byte;
#   - template renders a conversation of the committed chat fixtures exactly;
#   - run --temp 0 streams the text of the greedy ids `generate` prints for the same prompt,
#     and --stop ends the output just before the stop string;
#   - the same --seed gives the same sampled text;
#   - output to a full device (/dev/full) is a failure for every command that prints: run,
#     generate, tokenize (both ways), template, bench (table and --json), chat, gguf-info, the
#     global and a command's --help, serve --help: non-zero, the write named;
#   - bad input (no tokenizer, malformed id lists, ids outside the vocabulary, a bad --temp, an
#     empty --stop, a missing messages file, malformed messages, a tokenizer.json whose pattern
#     backtracks past the encode's budget) exits non-zero with a message.
# usage (from the repository root): bash tests/cli/test_text_cli.sh build/nemotron
suite=text-cli
. "$(dirname "$0")/checks.sh"
expect_fail() { # expect_fail DESCRIPTION STDIN_TEXT ARGS...: non-zero exit, a message, no stdout
    local what=$1 input=$2
    shift 2
    printf '%s' "$input" | "$bin" "$@" >"$work/out" 2>"$work/err"
    local rc=$?
    check "$what: exit $rc, expected non-zero" test "$rc" -ne 0
    check "$what: no message on stderr" test -s "$work/err"
    check "$what: printed on stdout: $(head -c 80 "$work/out")" test ! -s "$work/out"
}

# tokenize and back
text=$'In the beginning God created the heaven and the earth.\nCafé, 日本, 👍🏽 <|im_end|>'
ids=$(printf '%s' "$text" | "$bin" tokenize --tokenizer "$tok")
check "tokenize prints a JSON array: $ids" grep -qE '^\[[0-9]+(, [0-9]+)*\]$' <<<"$ids"
back=$(printf '%s' "$ids" | "$bin" tokenize --tokenizer "$tok" --decode; printf x)
check "decode(encode(text)) == text: '${back%x}'" test "${back%x}" = "$text"
check "<|im_end|> is one token (11)" grep -q '\b11\]$' <<<"$ids"

# template against a committed jinja2 rendering (the first case of the chat fixtures that has no
# tools and default options)
/usr/bin/env python3 - "$work" <<'PY' || true
import json, sys
cases = json.load(open("tests/fixtures/chat/cases.json"))
for c in cases:
    o = c.get("options") or {}
    if ("expected" in c and c.get("tools") is None and isinstance(c.get("messages"), list)
            and set(o) <= {"add_generation_prompt"}):
        json.dump(c["messages"], open(sys.argv[1] + "/messages.json", "w"), ensure_ascii=False)
        # the template's default is no generation prompt; the command's is one
        open(sys.argv[1] + "/flags", "w").write("" if o.get("add_generation_prompt") else "--no-generation-prompt")
        open(sys.argv[1] + "/expected.txt", "w").write(c["expected"])
        break
PY
if [ -f "$work/messages.json" ]; then
    # shellcheck disable=SC2046
    "$bin" template --messages "$work/messages.json" $(cat "$work/flags") >"$work/rendered.txt"
    check "template renders the fixture conversation exactly" cmp -s "$work/rendered.txt" "$work/expected.txt"
else
    check "found a plain conversation in tests/fixtures/chat/cases.json" false
fi

# run --temp 0 == the text of generate's greedy ids
prompt="And the LORD said unto Moses,"
pids=$(printf '%s' "$prompt" | "$bin" tokenize --tokenizer "$tok" | tr -d '[] ')
gids=$("$bin" generate -m "$model" --tokens "$pids" -n 20 --ignore-eos 2>/dev/null)
want=$(printf '[%s]' "$gids" | "$bin" tokenize --tokenizer "$tok" --decode)
got=$("$bin" run -m "$model" -p "$prompt" -n 20 --temp 0 2>/dev/null)
check "run --temp 0 prints prompt + the greedy text: '$got' vs '$prompt$want'" test "$got" = "$prompt$want"

# --stop: the output ends just before the stop string (7 characters of the greedy text from the 6th)
stop=${want:5:7}
got_stop=$("$bin" run -m "$model" -p "$prompt" -n 20 --temp 0 --stop "$stop" 2>/dev/null)
check "--stop '$stop' cuts the text: '$got_stop'" test "$got_stop" = "$prompt${want:0:5}"

# the same seed, the same sample
s1=$("$bin" run -m "$model" -p "$prompt" -n 16 --temp 0.9 --seed 5 2>/dev/null)
s2=$("$bin" run -m "$model" -p "$prompt" -n 16 --temp 0.9 --seed 5 2>/dev/null)
check "same --seed, same text" test -n "$s1" -a "$s1" = "$s2"

# stdout that cannot be written: a failure, never a silent 0 (issue 16)
# full NAME STDIN ARGS...: the command with stdout on /dev/full exits 1 naming the write
full() {
    local what=$1 input=$2
    shift 2
    printf '%s' "$input" | "$bin" "$@" >/dev/full 2>"$work/err"
    local rc=$?
    check "$what > /dev/full: exit $rc, expected 1" test "$rc" -eq 1
    check "$what > /dev/full: the message names the write: $(tail -c 200 "$work/err")" \
        grep -q "writing the output failed" "$work/err"
}
if [ -w /dev/full ]; then
    printf '[{"role": "user", "content": "hi"}]' >"$work/hi.json"
    full run "" run -m "$model" -p "$prompt" -n 4 --temp 0
    full generate "" generate -m "$model" --tokens 1,2,3 -n 2 --ignore-eos
    full tokenize "$prompt" tokenize --tokenizer "$tok"
    full "tokenize --decode" "[1, 2, 3]" tokenize --tokenizer "$tok" --decode
    full template "" template --messages "$work/hi.json"
    full bench "" bench -m "$model" -p 8 -n 4 -r 1
    full "bench --json" "" bench -m "$model" -p 8 -n 4 -r 1 --json
    full chat $'In the beginning\n' chat -m "$model" --no-think -n 2 --temp 0
    full gguf-info "" gguf-info tests/fuzz/corpus/gguf/every-value
    full --help "" --help
    full "generate --help" "" generate --help
    full "serve --help" "" serve --help
fi

# bad input
expect_fail "tokenize without --tokenizer" "x" tokenize
expect_fail "tokenize with a missing tokenizer" "x" tokenize --tokenizer "$work/nope.json"
printf '{"model": ' >"$work/bad.json"
expect_fail "tokenize with a malformed tokenizer.json" "x" tokenize --tokenizer "$work/bad.json"
expect_fail "decode of a non-array" '{"a": 1}' tokenize --tokenizer "$tok" --decode
# a tokenizer.json whose pattern backtracks cubically over spaces: refused, the regex named
python3 - "$tok" "$work/cubic.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\s*\s*\s*q|\s|\S"
json.dump(t, open(sys.argv[2], "w"))
EOF
expect_fail "tokenize with a pattern past the encode's budget" "$(printf '%2048s' '')" tokenize --tokenizer "$work/cubic.json"
check "the budget's message names the regex: $(head -c 200 "$work/err")" grep -qF '/\s*\s*\s*q|\s|\S/ backtracks too much' "$work/err"
expect_fail "decode of a non-integer" '[1, "x"]' tokenize --tokenizer "$tok" --decode
expect_fail "decode of an id outside the vocabulary" '[1, 4096]' tokenize --tokenizer "$tok" --decode
expect_fail "decode of trailing garbage" '[1, 2] x' tokenize --tokenizer "$tok" --decode
expect_fail "run --temp -1" "" run -m "$model" -p "x" --temp -1
expect_fail "run --top-p 0" "" run -m "$model" -p "x" --top-p 0
expect_fail "run --stop ''" "" run -m "$model" -p "x" --stop ""
expect_fail "run without -p" "" run -m "$model"
expect_fail "template without --messages" "" template
expect_fail "template with a missing file" "" template --messages "$work/none.json"
printf '[{"role": "user", "content": "hi"' >"$work/m.json"
expect_fail "template with malformed JSON" "" template --messages "$work/m.json"
printf '[{"content": "hi"}]' >"$work/m.json"
expect_fail "template with a message without a role" "" template --messages "$work/m.json"
printf '[{"role": "user", "content": "a\\u0000b"}, {"role": "assistant", "content": "c"}]' >"$work/m.json"
expect_fail "template with a NUL in a message (would cut the conversation)" "" template --messages "$work/m.json"
check "template with a NUL: the message names it" grep -q 'NUL character' "$work/err"

checks_summary
