#!/usr/bin/env bash
# test_serve_faults.sh - `nemotron serve` when loading and when the device fails (issue 15 items 1
# and 2):
#   - loading: with NEMOTRON_SERVE_LOAD_DELAY_MS (a test-only hook: the load thread waits that long
#     before it loads, src/server/http.c) the server answers while it loads: GET /health, GET
#     /v1/models and POST /v1/completions are 503 in OpenAI's shape with code "loading", then
#     /health turns 200; SIGTERM during the load exits 0 at once;
#   - a model without a tokenizer (synthetic ones): the server exits 1 naming --tokenizer; with
#     --tokenizer it serves; a tokenizer of more ids than the model's vocabulary is refused
#     (made by dev/serve/pad_tokenizer.py, whose padded ids are checked to decode);
#   - a device error: the emulated CUDA build (build/emu/nemotron, docs/TESTING.md "Fault
#     injection") with NT_EMU_FAIL=launch:N makes a launch of the first request fail with a sticky
#     illegal address. That request is a 500 in OpenAI's shape (code "device_error", the fault
#     named); a streamed one gets its 200, then an error event and [DONE]. The process lives on:
#     the device cannot make a new session, so /health is 503 with code "device_failed" and the
#     fault, new generations the same 503, /v1/models and /metrics 200 (nemotron_device_failed 1);
#     SIGTERM exits 0 within 5 s, with no sanitizer report.
# usage (from the repository root): bash tests/cli/test_serve_faults.sh build/nemotron
suite=serve_faults
. "$(dirname "$0")/checks.sh"
emu=$(dirname "$bin")/emu/nemotron
if ! command -v curl >/dev/null; then echo "FAIL serve faults: curl is missing (scripts/setup.sh installs it)" >&2; exit 1; fi
status() { curl -s -o "${2:-/dev/null}" -w '%{http_code}' "${@:3}" "$1"; }
err_shape='set(j["error"]) == {"message", "type", "param", "code"} and j["error"]["message"]'
# wait_healthy URL PID: until /health is 200 (30 s at most); 0 when it is
wait_healthy() {
    for _ in $(seq 300); do
        [ "$(status "$1/health")" = 200 ] && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
# stop NAME PID: SIGTERM, then the exit status and time and the log's lack of sanitizer reports
stop() {
    local start rc ms
    start=$(date +%s%N)
    kill -TERM "$2"
    wait "$2"
    rc=$?
    ms=$((($(date +%s%N) - start) / 1000000))
    check "$1: SIGTERM exit status $rc" test "$rc" = 0
    check "$1: exit in $ms ms (< 5000)" test "$ms" -lt 5000
    check "$1: no sanitizer report or crash in the log" bash -c "! grep -qiE 'sanitizer|runtime error|segmentation|abort' '$work/$1.log'"
}
body='{"prompt":"In the beginning","max_tokens":4}'
C=(-H 'Content-Type: application/json')

# ---- loading: 503 until the model is loaded ----
port=$(free_port)
url=http://127.0.0.1:$port
NEMOTRON_SERVE_LOAD_DELAY_MS=3000 "$bin" serve -m "$model" --port "$port" --parallel 1 --ctx 256 -t 1 >"$work/loading.log" 2>&1 &
pid=$!
pids+=("$pid")
for _ in $(seq 50); do [ "$(status "$url/health")" != 000 ] && break; sleep 0.05; done
check "loading: /health 503" test "$(status "$url/health" "$work/h")" = 503
check "loading: /health's error" json_check "$work/h" "$err_shape and j['error']['code'] == 'loading'"
check "loading: /v1/models 503" test "$(status "$url/v1/models" "$work/m")" = 503
check "loading: /v1/models's error" json_check "$work/m" "$err_shape and j['error']['code'] == 'loading'"
check "loading: a completion 503" test "$(status "$url/v1/completions" "$work/c" "${C[@]}" --data-binary "$body")" = 503
check "loading: the completion's error" json_check "$work/c" "$err_shape and j['error']['code'] == 'loading'"
check "loaded: /health turns 200" wait_healthy "$url" "$pid"
check "loaded: a completion 200" test "$(status "$url/v1/completions" /dev/null "${C[@]}" --data-binary "$body")" = 200
stop loading "$pid"
# SIGTERM while loading: nothing runs yet, the process exits at once
port=$(free_port)
NEMOTRON_SERVE_LOAD_DELAY_MS=30000 "$bin" serve -m "$model" --port "$port" --parallel 1 --ctx 256 -t 1 >"$work/stopped.log" 2>&1 &
pid=$!
pids+=("$pid")
for _ in $(seq 50); do [ "$(status "http://127.0.0.1:$port/health")" = 503 ] && break; sleep 0.05; done
stop stopped "$pid"
check "SIGTERM during the load: said so" grep -q "SIGTERM during the load" "$work/stopped.log"

# ---- a model without a tokenizer (as every synthetic one): --tokenizer ----
mkdir -p "$work/notok"
for f in config.json generation_config.json model.safetensors; do ln -s "$PWD/$model/$f" "$work/notok/$f"; done
"$bin" serve -m "$work/notok" --port "$(free_port)" --parallel 1 --ctx 256 -t 1 >"$work/notok.log" 2>&1
check "no tokenizer: the server exits 1" test $? = 1
check "no tokenizer: the log names --tokenizer" grep -q "needs --tokenizer FILE" "$work/notok.log"
port=$(free_port)
url=http://127.0.0.1:$port
"$bin" serve -m "$work/notok" --tokenizer "$model/tokenizer.json" --port "$port" --parallel 1 --ctx 256 -t 1 \
    >"$work/tokenizer.log" 2>&1 &
pid=$!
pids+=("$pid")
check "--tokenizer: healthy" wait_healthy "$url" "$pid"
check "--tokenizer: a completion 200" test "$(status "$url/v1/completions" "$work/t" "${C[@]}" --data-binary "$body")" = 200
check "--tokenizer: 4 tokens of text" json_check "$work/t" "j['usage']['completion_tokens'] == 4 and j['choices'][0]['text']"
stop tokenizer "$pid"
# dev/serve/pad_tokenizer.py (serve_bench.sh's tokenizer for synthetic Nano): the demo's padded to
# 5000 ids decodes a filler id; the server refuses it for the demo's 4096-token model
mkdir -p "$work/v5000"
echo '{"vocab_size": 5000}' >"$work/v5000/config.json"
python3 dev/serve/pad_tokenizer.py "$work/v5000" "$model" "$work/padded.json" >"$work/pad.log" 2>&1
check "pad_tokenizer.py: $(cat "$work/pad.log")" grep -q "5000 tokens (4096 from the base, 904 fillers)" "$work/pad.log"
check "padded: id 4999 decodes to a filler" test "$(echo 4999 | "$bin" tokenize --tokenizer "$work/padded.json" --decode)" = " xhkh"
check "padded: the base's ids decode as before" test "$(echo 1170,290,2281 | "$bin" tokenize --tokenizer "$work/padded.json" --decode)" = \
    "$(echo 1170,290,2281 | "$bin" tokenize --tokenizer "$model" --decode)"
"$bin" serve -m "$work/notok" --tokenizer "$work/padded.json" --port "$(free_port)" --parallel 1 --ctx 256 -t 1 >"$work/big.log" 2>&1
check "a tokenizer larger than the model: exit 1" test $? = 1
check "a tokenizer larger than the model: said so" grep -q "the tokenizer has 5000 tokens, more than the model's vocabulary (4096)" "$work/big.log"

# ---- a device error (the emulated CUDA backend, x86-64 builds only) ----
if [ ! -x "$emu" ]; then
    echo "test_serve_faults.sh: no $emu (make builds the CUDA emulation on x86-64 only): its checks skipped"
else
    # launch 50 falls in the first request's prompt (none run while the model loads)
    port=$(free_port)
    url=http://127.0.0.1:$port
    NT_EMU_FAIL=launch:50 "$emu" serve -m "$model" --device cuda --port "$port" --parallel 2 --ctx 256 -t 1 \
        >"$work/fault.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    check "device: the emulated server becomes healthy" wait_healthy "$url" "$pid"
    check "device fault: the request is a 500" test "$(status "$url/v1/completions" "$work/f1" "${C[@]}" --data-binary "$body")" = 500
    check "device fault: its error" json_check "$work/f1" \
        "$err_shape and j['error']['code'] == 'device_error' and 'illegal memory access' in j['error']['message']"
    check "device fault: the process lives" kill -0 "$pid"
    check "device fault: /health 503" test "$(status "$url/health" "$work/h")" = 503
    check "device fault: /health says why" json_check "$work/h" \
        "$err_shape and j['error']['code'] == 'device_failed' and 'illegal memory access' in j['error']['message']"
    check "device fault: a new generation 503" test "$(status "$url/v1/chat/completions" "$work/f2" "${C[@]}" \
        --data-binary '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":4}')" = 503
    check "device fault: its error" json_check "$work/f2" "$err_shape and j['error']['code'] == 'device_failed'"
    check "device fault: /v1/models 200" test "$(status "$url/v1/models")" = 200
    check "device fault: /metrics 200" test "$(status "$url/metrics" "$work/metrics")" = 200
    check "device fault: nemotron_device_failed 1" grep -q '^nemotron_device_failed 1$' "$work/metrics"
    stop fault "$pid"
    # a stream: its 200 is sent when the request is queued, so the fault comes as an error event
    port=$(free_port)
    url=http://127.0.0.1:$port
    NT_EMU_FAIL=launch:50 "$emu" serve -m "$model" --device cuda --port "$port" --parallel 1 --ctx 256 -t 1 \
        >"$work/stream.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    check "device, streamed: healthy" wait_healthy "$url" "$pid"
    check "device fault, streamed: 200" test "$(status "$url/v1/completions" "$work/s" "${C[@]}" \
        --data-binary '{"prompt":"In the beginning","max_tokens":4,"stream":true}')" = 200
    check "device fault, streamed: an error event, then [DONE]" python3 - "$work/s" <<'PY'
import json, sys
events = open(sys.argv[1]).read().split("\n\n")
ok = len(events) >= 3 and events[-1] == "" and events[-2] == "data: [DONE]" and \
     json.loads(events[-3][6:])["error"]["code"] == "device_error"
if not ok: print("  stream: %r" % events[:4], file=sys.stderr)
sys.exit(0 if ok else 1)
PY
    check "device fault, streamed: /health 503" test "$(status "$url/health")" = 503
    stop stream "$pid"
fi

checks_summary
