#!/usr/bin/env bash
# test_chat.sh - `nemotron chat` driven through a pipe (not a terminal), on the bundled model:
#   - /help and an unknown /command are answered locally: no turn reaches the model;
#   - the second turn of a --no-think conversation processes only its new tokens (the stats say
#     how many were reused), and its answer is the greedy continuation `generate` gives for the
#     whole rendered conversation from position 0;
#   - a conversation that outgrows the context drops its oldest turns, says so, and goes on;
#   - a message that does not fit even alone is refused, and the next one is answered;
#   - a line of invalid UTF-8 is reported and not sent; the session goes on;
#   - a line over 64 KiB is one message, never two;
#   - a """ block is one message, its lines joined with newlines (the prompt's tokens are those of
#     the template's rendering of that message); a block the input ends inside is not sent;
#   - //text sends /text;
#   - -p TEXT / -f FILE (and run -i -p, llama.cpp's habit) is the first message: the same chat as
#     typing it first; chat -p - (stdin is the conversation) and -p with -f are refused;
#   - Ctrl-C during an answer stops that answer and the chat goes on; Ctrl-C while the chat
#     waits for input ends it with status 130;
#   - on a terminal (tests/cli/chat_terminal.py, a pseudo-terminal) lines go through libedit:
#     the up arrow recalls the previous message.
# Every chat must exit 0 at the end of its input.
# usage (from the repository root): bash tests/cli/test_chat.sh build/nemotron
suite=chat
. "$(dirname "$0")/checks.sh"
# chat INPUT ARGS...: runs a greedy chat on INPUT; stdout in $work/out, stderr in $work/err
chat() {
    local input=$1
    shift
    printf '%s' "$input" | "$bin" chat -m "$model" --temp 0 "$@" >"$work/out" 2>"$work/err"
    chat_rc=$?
}
turns() { grep -c '^\[prompt ' "$work/err"; }

# local commands
chat $'/help\n/bogus\nIn the beginning\n/exit\n' --no-think -n 6
check "help/unknown: exit $chat_rc" test "$chat_rc" -eq 0
check "/help lists the commands" grep -q '/no_think' "$work/err"
check "an unknown command is named: $(grep -i unknown "$work/err")" grep -q "unknown command '/bogus'" "$work/err"
check "only the real message reached the model ($(turns) turns)" test "$(turns)" -eq 1

# -p TEXT / -f FILE (run -i -p: llama.cpp's interactive mode after a prompt): the first message,
# answered before the input is read; the same chat as typing it first
chat $'In the beginning\nAnd God said\n' --no-think -n 8
want_out=$(cat "$work/out")
printf 'And God said\n' | "$bin" run -m "$model" -i -p "In the beginning" --temp 0 --no-think -n 8 \
    >"$work/out" 2>"$work/err"
check "run -i -p: exit $?, two turns ($(turns))" test "$(turns)" -eq 2
check "run -i -p TEXT = TEXT typed as the first message: '$(cat "$work/out")' vs '$want_out'" \
    test -n "$want_out" -a "$(cat "$work/out")" = "$want_out"
check "the first message is shown: $(grep '^> ' "$work/err")" grep -qx '> In the beginning' "$work/err"
printf 'In the beginning' >"$work/first.txt"
chat $'And God said\n' --no-think -n 8 -f "$work/first.txt"
check "chat -f FILE = the same: exit $chat_rc" test "$chat_rc" -eq 0 -a "$(cat "$work/out")" = "$want_out"
chat $'x\n' -p - -n 2
check "chat -p - (stdin is the chat): exit $chat_rc, said: $(head -1 "$work/err")" \
    test "$chat_rc" -eq 2 -a -n "$(grep 'reads its messages from stdin' "$work/err")"
chat $'x\n' -p a -f "$work/first.txt" -n 2
check "chat -p and -f together: exit $chat_rc" test "$chat_rc" -eq 2 -a -n "$(grep 'not both' "$work/err")"
printf '\xff' >"$work/bad.txt"
chat $'And God said\n' --no-think -n 4 -f "$work/bad.txt"
check "a first message of invalid UTF-8 is reported, the chat goes on ($(turns) turn)" \
    test "$chat_rc" -eq 0 -a "$(turns)" -eq 1 -a -n "$(grep 'first message (-f) is not valid UTF-8' "$work/err")"

# the second turn reuses what the session holds, and answers as a fresh evaluation would
chat $'In the beginning\nAnd God said\n' --no-think -n 12 --verbose-prompt
check "two turns: exit $chat_rc" test "$chat_rc" -eq 0
check "two turns answered ($(turns))" test "$(turns)" -eq 2
reused=$(grep '^\[prompt ' "$work/err" | sed -n 2p | sed -n 's/.*(\([0-9]*\) reused).*/\1/p')
check "the second turn reused the first's tokens: '$(grep '^\[prompt ' "$work/err" | sed -n 2p)'" \
    test "${reused:-0}" -gt 0
# the second prompt's ids, as --verbose-prompt listed them, evaluated from position 0
ids=$(awk '/prompt: [0-9]+ tokens/ { n++ } n == 2 && /->/ { printf "%s%s", sep, $1; sep = "," }' "$work/err")
answer2=$(sed -n '2,$p' "$work/out")
gids=$("$bin" generate -m "$model" --tokens "$ids" -n 12 --ignore-eos 2>/dev/null)
want=$(printf '%s' "$gids" | "$bin" tokenize --tokenizer "$tok" --decode)
check "the reused turn answers as generate from position 0: '$(tail -c 200 "$work/out")' vs '$want'" \
    test -n "$want" -a "$(cat "$work/out")" != "${want}" -a "${answer2: -${#want}}" = "$want"

# the conversation outgrows the context: the oldest turns go, the chat goes on
chat $'In the beginning God created the heaven\nAnd the earth was without form\nAnd God said, Let there be light\nAnd God saw the light\nAnd God called the light Day\n' \
    --no-think -n 8 -c 96
check "overflow: exit $chat_rc: $(tail -c 300 "$work/err")" test "$chat_rc" -eq 0
check "overflow: said that turns were dropped" grep -q 'oldest turn' "$work/err"
check "overflow: every message answered ($(turns) of 5)" test "$(turns)" -eq 5

# a message too long for the context even alone is refused; the next one is answered
long=$(printf 'And it came to pass %.0s' $(seq 60))
chat "$long"$'\nAnd God said\n' --no-think -n 8 -c 96
check "too long alone: exit $chat_rc" test "$chat_rc" -eq 0
check "too long alone: refused, said why" grep -q 'does not fit the context of 96 positions' "$work/err"
check "too long alone: the next message was answered ($(turns))" test "$(turns)" -eq 1

# invalid UTF-8 and a NUL byte are reported, never sent
chat $'caf\xc3\x28\nIn the beginning\n' --no-think -n 4
check "invalid UTF-8: exit $chat_rc" test "$chat_rc" -eq 0
check "invalid UTF-8: reported with its byte" grep -q 'not valid UTF-8 (byte 4)' "$work/err"
check "invalid UTF-8: the good line was answered ($(turns))" test "$(turns)" -eq 1

# a line over 64 KiB is one message (here refused as one: it cannot fit 256 positions)
big=$(head -c 70000 /dev/zero | tr '\0' 'a')
chat "$big"$'\nIn the beginning\n' --no-think -n 4 -c 256
check "70000-byte line: exit $chat_rc" test "$chat_rc" -eq 0
check "70000-byte line: refused once ($(grep -c 'not sent' "$work/err"))" test "$(grep -c 'not sent' "$work/err")" -eq 1
check "70000-byte line: one turn after it, not two ($(turns))" test "$(turns)" -eq 1

# a """ block is one message whose lines are joined with newlines
chat $'"""\nIn the\nbeginning\n"""\n' --no-think -n 4 --verbose-prompt
printf '[{"role": "user", "content": "In the\\nbeginning"}]' >"$work/m.json"
n_want=$("$bin" template --messages "$work/m.json" --no-think | "$bin" tokenize --tokenizer "$tok" | tr ',' '\n' | wc -l)
n_got=$(sed -n 's/.*prompt: \([0-9]*\) tokens.*/\1/p' "$work/err" | head -1)
check "block: exit $chat_rc" test "$chat_rc" -eq 0
check "block: one turn ($(turns))" test "$(turns)" -eq 1
check "block: the prompt is the template's for 'In the\\nbeginning' ($n_got vs $n_want tokens)" test "${n_got:-0}" -eq "$n_want"
chat $'"""first line\nsecond line\n' --no-think -n 4
check "unterminated block: exit $chat_rc" test "$chat_rc" -eq 0
check "unterminated block: said so" grep -q 'inside a """ block' "$work/err"
check "unterminated block: not sent ($(turns))" test "$(turns)" -eq 0

# //text is a message that starts with /
chat $'//In the beginning\n' --no-think -n 4
check "//text: sent as one turn ($(turns))" test "$(turns)" -eq 1

# Ctrl-C: an answer stops, the chat goes on (input through a fifo, so it arrives when we say).
# Each SIGINT is sent once the answer is being printed (the handler is in place: a background
# job ignores a SIGINT that comes earlier), and the second answer is interrupted too, so no
# answer runs to the end of the context; a watchdog ends a hung chat.
# grows FILE SIZE: waits (30 s at most) until FILE holds more than SIZE bytes
grows() { for _ in $(seq 300); do [ "$(stat -c %s "$1")" -gt "$2" ] && return 0; sleep 0.1; done; return 1; }
# said N: waits until the chat's stderr holds N interrupted turns
said() { for _ in $(seq 300); do [ "$(grep -c 'interrupted\]' "$work/err")" -ge "$1" ] && return 0; sleep 0.1; done; return 1; }
mkfifo "$work/in"
"$bin" chat -m "$model" --no-think -n 1000000 -c 8192 <"$work/in" >"$work/out" 2>"$work/err" &
pid=$!
(for _ in $(seq 1200); do sleep 0.1; kill -0 $pid 2>/dev/null || exit 0; done; kill -KILL $pid) &
watchdog=$!
exec 3>"$work/in"
printf 'In the beginning\n' >&3
grows "$work/out" 0 && kill -INT $pid
said 1
size=$(stat -c %s "$work/out")
printf 'And God said\n' >&3
grows "$work/out" "$size" && kill -INT $pid
said 2
printf '/exit\n' >&3
exec 3>&-
wait $pid
rc=$?
kill $watchdog 2>/dev/null
check "Ctrl-C in an answer: the chat went on and ended with 0 (exit $rc)" test $rc -eq 0
check "Ctrl-C in an answer: the answer says it was interrupted" grep -q 'interrupted\]' "$work/err"
check "Ctrl-C in an answer: the next message was answered ($(turns))" test "$(turns)" -eq 2
# Ctrl-C at the input: 130 (sent once the chat has said it is ready)
mkfifo "$work/in2"
"$bin" chat -m "$model" --no-think <"$work/in2" >/dev/null 2>"$work/err" &
pid=$!
exec 4>"$work/in2"   # the input stays open: the chat waits at it
for _ in $(seq 300); do grep -q '^chat with' "$work/err" && break; sleep 0.1; done
kill -INT $pid
wait $pid
rc=$?
exec 4>&-
check "Ctrl-C at the input: exit $rc, expected 130" test $rc -eq 130

# on a terminal (a pseudo-terminal), libedit reads the lines: the up arrow recalls the last one
python3 tests/cli/chat_terminal.py "$bin" "$model" >"$work/tty" 2>&1
rc=$?
check "terminal: exit $rc, expected 0" test $rc -eq 0
check "terminal: the up arrow sent the first message again: $(tail -1 "$work/tty")" grep -q '^turns=2 recalled=1$' "$work/tty"
check "terminal: no raw escape sequence reached the model" test -z "$(grep -F '^[[A' "$work/tty")"

checks_summary
