#!/usr/bin/env bash
# test_cli_habits.sh - the command line as a llama.cpp user types it, on the bundled model:
#   - aliases: -c/--ctx-size (= --ctx), -f/--file (= -p TEXT), -p - (stdin), -sys/--system-prompt
#     (the system prompt reaches the model), -s (= --seed), --seed -1 (a random seed, printed,
#     that repeats the run), -i (run becomes chat; -p TEXT its first message), -ngl (0: the CPU;
#     N > 0: the GPU, said), --verbose-prompt (the prompt's ids), bench lists (-p 8,16 -n 4,8: one row each; --json
#     arrays), bench --verify (a line per drafted length, the JSON's verify array);
#   - per-command --help lists that command's options only; an option that does not apply to a
#     command is refused, naming both;
#   - Ctrl-C: run exits 130 during generation and during prompt processing; an interrupted
#     synth leaves neither its .partial nor the output;
#   - one id list both ways: generate's 1,2,3 decodes with tokenize --decode, and tokenize's
#     [1, 2, 3] is accepted by --tokens with the same result as 1,2,3;
#   - --ctx past the trained length (4096) warns, for a directory and a .nemo; a run cut by the
#     end of the context says so;
#   - a model file cut short during a run: a message and status 1 (not SIGBUS's bare death);
#   - NaN weights or an overflowing config value: an error naming the position, no output;
#   - a load longer than a second says so (NEMOTRON_LOAD_DELAY_MS, a test-only delay, stands in
#     for a multi-GB model): a line naming the file and its size, then the time it took; a
#     quick load says nothing.
# usage (from the repository root): bash tests/cli/test_cli_habits.sh build/nemotron
suite=cli-habits
. "$(dirname "$0")/checks.sh"
prompt="And the LORD said unto Moses,"

# aliases of the context length: -c and --ctx-size refuse a run that cannot fit, as --ctx does
for o in -c --ctx-size --ctx; do
    "$bin" generate -m "$model" --tokens 1,2 "$o" 3 -n 5 --ignore-eos >/dev/null 2>"$work/err"
    check "generate $o 3: exit 2 with the context named" test $? -eq 2 -a -n "$(grep 'need a context of' "$work/err")"
done

# the prompt: -p TEXT, -f FILE and -p - give the same greedy text
want=$("$bin" run -m "$model" -p "$prompt" -n 12 --temp 0 2>/dev/null)
printf '%s' "$prompt" >"$work/prompt.txt"
got_f=$("$bin" run -m "$model" -f "$work/prompt.txt" -n 12 --temp 0 2>/dev/null)
got_stdin=$(printf '%s' "$prompt" | "$bin" run -m "$model" -p - -n 12 --temp 0 2>/dev/null)
check "run -f FILE = run -p TEXT: '$got_f'" test -n "$want" -a "$got_f" = "$want"
check "run -p - (stdin) = run -p TEXT: '$got_stdin'" test "$got_stdin" = "$want"
"$bin" run -m "$model" -p x -f "$work/prompt.txt" >/dev/null 2>&1
check "run -p and -f together: a usage error" test $? -eq 2

# seeds: -s is --seed; --seed -1 picks one, prints it, and that seed repeats the text
s1=$("$bin" run -m "$model" -p "$prompt" -n 12 --temp 0.9 -s 5 2>/dev/null)
s2=$("$bin" run -m "$model" -p "$prompt" -n 12 --temp 0.9 --seed 5 2>/dev/null)
check "-s 5 = --seed 5" test -n "$s1" -a "$s1" = "$s2"
r1=$("$bin" run -m "$model" -p "$prompt" -n 12 --temp 0.9 --seed -1 2>"$work/err")
seed=$(sed -n 's/^nemotron: seed \([0-9]*\)$/\1/p' "$work/err")
check "--seed -1 prints the seed it used: $(head -1 "$work/err")" test -n "$seed"
r2=$("$bin" run -m "$model" -p "$prompt" -n 12 --temp 0.9 --seed "${seed:-0}" 2>/dev/null)
check "the printed seed repeats the run: '$r1' vs '$r2'" test "$r1" = "$r2"
"$bin" run -m "$model" -p "$prompt" -n 2 2>"$work/err" >/dev/null
check "run without --seed says which seed it drew" grep -q '^nemotron: seed [0-9]*$' "$work/err"

# -sys: the system prompt is in the chat's prompt; -i: run is a chat
printf 'In the beginning\n' | "$bin" chat -m "$model" --no-think -n 2 --temp 0 --verbose-prompt \
    -sys "Thou art Moses" >/dev/null 2>"$work/err"
check "-sys reaches the prompt" grep -q "Moses" <(grep -- "->" "$work/err" | tr -d "\n")
printf 'In the beginning\n' | "$bin" chat -m "$model" --no-think -n 2 --temp 0 --verbose-prompt \
    --system-prompt "Thou art Moses" >/dev/null 2>"$work/err2"
check "--system-prompt = -sys" cmp -s <(grep -- "->" "$work/err") <(grep -- "->" "$work/err2")
printf 'In the beginning\n/exit\n' | "$bin" run -i -m "$model" --no-think -n 4 --temp 0 >/dev/null 2>"$work/err"
check "run -i chats: exit $?" grep -q '^\[prompt ' "$work/err"
"$bin" run -i -m "$model" -p "In the beginning" --no-think -n 4 --temp 0 </dev/null >/dev/null 2>"$work/err"
check "run -i -p TEXT: TEXT is the chat's first message, answered: exit $?" grep -q '^\[prompt ' "$work/err"
"$bin" run -i -m "$model" --ignore-eos </dev/null >/dev/null 2>"$work/err"
check "run -i with a flag chat does not take: refused, saying -i makes a chat" \
    grep -q "does not apply to 'chat' (-i makes run a chat)" "$work/err"

# -ngl: 0 is the CPU; N > 0 asks for the GPU and says what that means here
g0=$("$bin" generate -m "$model" --tokens 1,2,3 -n 3 -ngl 0 2>/dev/null)
g=$("$bin" generate -m "$model" --tokens 1,2,3 -n 3 2>/dev/null)
check "-ngl 0 runs on the CPU: '$g0'" test -n "$g" -a "$g0" = "$g"
"$bin" generate -m "$model" --tokens 1,2,3 -n 3 -ngl 99 >/dev/null 2>"$work/err"
check "-ngl 99 explains itself" grep -q -- "-ngl 99: every layer runs on the GPU (--device cuda)" "$work/err"
"$bin" generate -m "$model" --tokens 1,2,3 -n 3 -ngl 99 --device cpu >/dev/null 2>"$work/err"
check "-ngl 99 --device cpu: refused as a contradiction" grep -q "contradicts --device cpu" "$work/err"

# --verbose-prompt lists the prompt's ids, those tokenize gives
"$bin" run -m "$model" -p "$prompt" -n 1 --verbose-prompt >/dev/null 2>"$work/err"
vp=$(grep -- "->" "$work/err" | awk '{ printf "%s%s", s, $1; s = "," }')
tk=$(printf '%s' "$prompt" | "$bin" tokenize --tokenizer "$tok" | tr -d '[] ')
check "--verbose-prompt ids = tokenize's: $vp vs $tk" test -n "$vp" -a "$vp" = "$tk"

# bench lists: a row per length
"$bin" bench -m "$model" -p 8,16 -n 4,8 -r 1 >"$work/bench" 2>/dev/null
rows=$(grep -cE '\| +(pp8|pp16|tg4|tg8) +\|' "$work/bench")
check "bench -p 8,16 -n 4,8: four rows ($rows)" test "$rows" -eq 4
"$bin" bench -m "$model" -p 8,16 -n 4 -r 1 --json >"$work/bench.json" 2>/dev/null
check "bench --json with a -p list: pp is an array of 2, tg one object" python3 -c "
import json, sys
d = json.load(open('$work/bench.json'))
sys.exit(not (isinstance(d['pp'], list) and [x['n'] for x in d['pp']] == [8, 16] and d['tg']['n'] == 4))"
"$bin" bench -m "$model" -p 8,x >/dev/null 2>"$work/err"
check "bench -p 8,x: refused naming the item" grep -q "'x' is not an integer" "$work/err"
# bench --verify: a line per drafted length, and the JSON's verify array with positive times
"$bin" bench -m "$model" -p 8 -n 4 -r 1 --verify 1,4 >"$work/bench" 2>/dev/null
rows=$(grep -cE '^verify pass of 1\+(1|4) positions: [0-9.]+ ms = [0-9.]+ decode steps; accept\(1\): [0-9.]+ ms$' "$work/bench")
check "bench --verify 1,4: two verify lines ($rows)" test "$rows" -eq 2
"$bin" bench -m "$model" -p 8 -n 4 -r 2 --verify 2 --json >"$work/bench.json" 2>/dev/null
check "bench --verify --json: verify [{k: 2, seconds > 0, decode_steps > 0}]" python3 -c "
import json, sys
v = json.load(open('$work/bench.json'))['verify']
sys.exit(not (len(v) == 1 and v[0]['k'] == 2 and v[0]['seconds'] > 0 and v[0]['decode_steps'] > 0
              and v[0]['accept_seconds'] > 0))"
"$bin" bench -m "$model" -p 8 -n 4 -r 1 --pass 4 --verify 8 >/dev/null 2>"$work/err"
check "bench --pass 4 --verify 8: refused (verify_max past pass_max), non-zero" grep -qi "verify" "$work/err"

# a model file cut short while a run reads it: a message and status 1, not a bare "Bus error"
cp -r "$model" "$work/shrink"
"$bin" run -m "$work/shrink" -p "And" -n 1000000 --ignore-eos --temp 0 >"$work/out" 2>"$work/err" &
runner=$!
for _ in $(seq 100); do [ -s "$work/out" ] && break; sleep 0.1; done # generating
truncate -s 100000 "$work/shrink/model.safetensors"
wait $runner
rc=$?
check "model cut short during a run: status 1 ($rc)" test "$rc" -eq 1
check "model cut short during a run: the message says so" grep -q 'a model file changed while in use' "$work/err"

# non-finite values are an error naming the position, never sampled from: a NaN in the final
# norm's weights; a config value that overflows (routed_scaling_factor 1e38)
# poison DIR TENSOR [ROW]: a copy of the model in DIR with BF16 NaN over TENSOR (or its row ROW)
poison() {
    cp -r "$model" "$1"
    python3 tests/tools/poison_safetensors.py "$1/model.safetensors" "$2" ${3:+"$3"}
}
poison "$work/nan" backbone.norm_f.weight
"$bin" generate -m "$work/nan" --tokens 1,2,3 -n 4 >"$work/out" 2>"$work/err"
rc=$?
check "NaN weights: generate fails ($rc), prints no ids" test "$rc" -ne 0 -a ! -s "$work/out"
check "NaN weights: the message names the position" grep -q 'logits of position 0 are not finite' "$work/err"
"$bin" run -m "$work/nan" -p "And" -n 4 --temp 0 >"$work/out" 2>"$work/err"
check "NaN weights: run --temp 0 fails too ($?)" grep -q 'are not finite' "$work/err"
# a NaN in one token's embedding row: named at that token's position (1), where it first appears
poison "$work/nanemb" backbone.embeddings.weight 2
"$bin" generate -m "$work/nanemb" --tokens 1,2,3 -n 4 >"$work/out" 2>"$work/err"
check "NaN in token 2's embedding row: the position it first appears at (1)" \
    grep -q 'logits of position 1 are not finite' "$work/err"
cp -r "$model" "$work/overflow"
sed -i 's/"routed_scaling_factor": *[0-9.e+-]*/"routed_scaling_factor": 1e38/' "$work/overflow/config.json"
"$bin" generate -m "$work/overflow" --tokens 1,2,3 -n 4 >"$work/out" 2>"$work/err"
rc=$?
check "routed_scaling_factor 1e38: generate fails ($rc) with non-finite values" \
    grep -q 'not finite' "$work/err"

# per-command help; options that do not apply are refused
"$bin" generate --help >"$work/help"
check "generate --help: exit 0, lists --tokens" grep -q -- "--tokens" "$work/help"
check "generate --help: does not list --temp" test -z "$(grep -- "--temp" "$work/help")"
"$bin" tokenize --help >"$work/help"
check "tokenize --help lists --decode, not -m" test -n "$(grep -- --decode "$work/help")" -a -z "$(grep -- --model "$work/help")"
"$bin" generate -m "$model" --tokens 1 --temp 0.5 >/dev/null 2>"$work/err"
rc=$?
check "generate --temp: exit $rc, expected 2" test $rc -eq 2
check "generate --temp: names the flag and the command" grep -q "option '--temp' does not apply to 'generate'" "$work/err"
"$bin" tokenize --tokenizer "$tok" -n 5 </dev/null >/dev/null 2>"$work/err"
check "tokenize -n: refused" grep -q "option '-n' does not apply to 'tokenize'" "$work/err"

# one id list both ways
gids=$("$bin" generate -m "$model" --tokens 1170,278,3 -n 6 --ignore-eos 2>/dev/null)
t1=$(printf '%s' "$gids" | "$bin" tokenize --tokenizer "$tok" --decode)
t2=$(printf '[%s]' "${gids//,/, }" | "$bin" tokenize --tokenizer "$tok" --decode)
check "tokenize --decode takes generate's '$gids'" test -n "$t1" -a "$t1" = "$t2"
tids=$(printf '%s' "$prompt" | "$bin" tokenize --tokenizer "$tok")
a1=$("$bin" generate -m "$model" --tokens "$tids" -n 4 --ignore-eos 2>/dev/null)
a2=$("$bin" generate -m "$model" --tokens "$(tr -d '[] ' <<<"$tids")" -n 4 --ignore-eos 2>/dev/null)
check "--tokens takes tokenize's '$tids' as its comma form" test -n "$a1" -a "$a1" = "$a2"
"$bin" generate -m "$model" --tokens "[1, 2" -n 1 >/dev/null 2>"$work/err"
check "--tokens '[1, 2': refused, the bracket named" grep -q "does not end with ']'" "$work/err"

# the context: past the trained length warns; the end of it cuts the text and says so
"$bin" run -m "$model" -p "$prompt" -n 2 -c 5000 >/dev/null 2>"$work/err"
check "-c 5000 > 4096 trained: a warning" grep -q "longer than the 4096 positions the model was trained on" "$work/err"
"$bin" run -m "$model" -p "$prompt" -n 2 -c 4096 >/dev/null 2>"$work/err"
check "-c 4096: no warning" test -z "$(grep trained "$work/err")"
"$bin" convert "$model" -o "$work/demo.nemo" >/dev/null 2>&1
"$bin" generate -m "$work/demo.nemo" --tokens 1,2,3 -n 1 -c 5000 >/dev/null 2>"$work/err"
check "-c 5000 on a .nemo (its config inside): the same warning" \
    grep -q "longer than the 4096 positions the model was trained on" "$work/err"
"$bin" run -m "$model" -p "$prompt" -n 100 -c 20 --temp 0 --ignore-eos >/dev/null 2>"$work/err"
check "a run cut by the context says so" grep -q "the context of 20 positions is full" "$work/err"

# a slow load speaks (after a second), a quick one does not
NEMOTRON_LOAD_DELAY_MS=1500 "$bin" generate -m "$work/demo.nemo" --tokens 1,2 -n 1 >/dev/null 2>"$work/err"
check "a slow load: the line naming the file and its size: $(head -1 "$work/err")" \
    grep -q "^nemotron: loading $work/demo.nemo (0.0[0-9] GB): verifying and mapping the weights, [0-9]* s$" "$work/err"
check "a slow load: the time it took" grep -q "^nemotron: loaded $work/demo.nemo in [0-9.]* s$" "$work/err"
"$bin" generate -m "$model" --tokens 1,2 -n 1 >/dev/null 2>"$work/err"
check "a quick load (a directory, mapped): no word of it" test -z "$(grep 'loading\|loaded' "$work/err")"

# Ctrl-C: 130 during generation and during prompt processing (the flag survives the prompt).
# interrupt PID OUT: SIGINT once the run has written to OUT (run prints the prompt after its
# handler is in place: a background job of a script ignores a SIGINT that comes before, and a
# loaded machine may take seconds to get there), then its status; a watchdog ends a hung run.
interrupt() {
    local pid=$1 out=$2
    for _ in $(seq 600); do [ -s "$out" ] && break; sleep 0.1; done
    [ -s "$out" ] || echo "FAIL $suite: no output in 60 s: SIGINT sent before the handler may be in place" >&2
    kill -INT "$pid"
    # (a loop of short sleeps, so the watchdog ends with the run and holds no pipe open)
    (for _ in $(seq 1200); do sleep 0.1; kill -0 "$pid" 2>/dev/null || exit 0; done; kill -KILL "$pid") &
    local watchdog=$!
    wait "$pid"
    local rc=$?
    kill "$watchdog" 2>/dev/null
    return $rc
}
# (each run writes a file of its own: the shell empties an old one only once the run has
# started, so a reused name could show the last run's output and send SIGINT too early)
"$bin" run -m "$model" -p "$prompt" -n 1000000 --ignore-eos >"$work/out-gen" 2>"$work/err" &
interrupt $! "$work/out-gen"
rc=$?
check "Ctrl-C while generating: exit $rc, expected 130" test $rc -eq 130
python3 -c "print(' '.join(['and the LORD said unto Moses'] * 6000))" >"$work/long.txt"
"$bin" run -m "$model" -f "$work/long.txt" -c 40000 -n 4 >"$work/out-prompt" 2>"$work/err" &
interrupt $! "$work/out-prompt"
rc=$?
check "Ctrl-C in the prompt: exit $rc, expected 130" test $rc -eq 130
check "Ctrl-C in the prompt: nothing generated: $(tail -1 "$work/err")" grep -q "generated 0 tokens.*interrupted" "$work/err"

# an interrupted synth removes its .partial (mini: ~3.3 GB, far from written in a second)
"$bin" synth --shape mini -o "$work/mini.nemo" -t 1 >/dev/null 2>&1 &
pid=$!
# (30 s at most: the ASan build on a loaded machine takes seconds to start writing)
for _ in $(seq 300); do [ -s "$work/mini.nemo.partial" ] && break; sleep 0.1; done
check "synth started writing its .partial" test -s "$work/mini.nemo.partial"
kill -INT $pid
wait $pid
rc=$?
check "interrupted synth: exit $rc, expected 130" test $rc -eq 130
check "interrupted synth: no .partial, no output: $(ls "$work" | grep mini)" test -z "$(ls "$work" | grep mini)"

checks_summary
