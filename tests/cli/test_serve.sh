#!/usr/bin/env bash
# test_serve.sh - `nemotron serve` end to end on the bundled model (models/nemotron-h-kjv), driven
# by curl on free ports:
#   - /health, /v1/models, /metrics; chat plain and streamed (every event a JSON chunk of one id,
#     a finish reason, the usage chunk, "data: [DONE]" last); completions from text and from ids,
#     streamed too; the same seed gives the same text;
#   - every error status in OpenAI's shape: malformed and wrongly typed JSON 400, unknown model
#     404, a prompt longer than the context 400, a missing or wrong key 401, a body over the limit
#     413, a full queue 429;
#   - a two-turn chat whose second turn reports the first turn's prompt as cached tokens;
#   - 16 concurrent streaming clients, 6 of which hang up early: every completed stream is well
#     formed, the slots and the queue are free afterwards, the server still answers;
#   - speculative decoding (--spec ngram, --draft-model: the model drafting for itself): the same
#     text as the plain server and as "speculative": false, at temperature 0 and seeded sampling,
#     streamed too; /metrics counts drafted and accepted tokens; a request asking for what the
#     server cannot do (no --spec, no draft model, no MTP drafting, a larger max, a bad type) is a
#     400 naming the field; bad --spec values, --spec mtp on a model without MTP layers and a draft
#     model of another vocabulary stop the server at start;
#   - --spec mtp on tests/fixtures/latent-mtp-f32 (checks.sh's mtp_model): the startup line names
#     the drafter; completions and a chat, greedy and seeded, streamed too, the text of a server
#     without speculation, with the default, {"type": "mtp", "max": 2}, "ngram" and false; /metrics
#     counts the speculative requests and the MTP step's drafts;
#   - the official openai npm package (tests/openai/serve_test.mjs) against the same servers;
#   - SIGTERM during a stream: the server exits 0 within 5 s.
# usage (from the repository root): bash tests/cli/test_serve.sh build/nemotron
suite=serve
. "$(dirname "$0")/checks.sh"
if ! command -v curl >/dev/null; then echo "FAIL serve: curl is missing (scripts/setup.sh installs it)" >&2; exit 1; fi
# start_server NAME ARGS...: starts it in the background, waits until /health says 200
start_server() {
    local name=$1
    shift
    local port
    port=$(free_port)
    "$bin" serve -m "$model" --port "$port" "$@" >"$work/$name.log" 2>&1 &
    local pid=$!
    pids+=("$pid")
    eval "${name}_pid=$pid ${name}_url=http://127.0.0.1:$port"
    for _ in $(seq 100); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ] && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "FAIL serve: $name did not become healthy:" >&2
    cat "$work/$name.log" >&2
    exit 1
}

key=test-key-$$
printf '%s\n' "$key" >"$work/key"
start_server main --api-key-file "$work/key" --parallel 4 --ctx 1024 -t 1
auth=(-H "Authorization: Bearer $key")
# post URL BODY OUT: the status code on stdout, the body in OUT
post() { curl -s -o "$3" -w '%{http_code}' "${auth[@]}" -H 'Content-Type: application/json' --data-binary "$2" "$1"; }


# sse_check FILE KIND: a well-formed stream: only "data: " events, each a chunk of one id and of
# the kind's object type, one finish_reason, the usage chunk when asked, [DONE] last
sse_check() {
    python3 - "$1" "$2" "${3:-}" <<'PY'
import json, sys
raw = open(sys.argv[1]).read()
kind, want_usage = sys.argv[2], sys.argv[3] == "usage"
def fail(msg):
    print("  %s\n  stream: %s" % (msg, raw[:600]), file=sys.stderr); sys.exit(1)
if not raw.endswith("data: [DONE]\n\n"): fail("does not end with data: [DONE]")
events = raw.split("\n\n")[:-1]
ids, finishes, usage, text = set(), 0, 0, ""
for ev in events[:-1]:
    if not ev.startswith("data: ") or "\n" in ev: fail("malformed event %r" % ev[:80])
    c = json.loads(ev[6:])
    if "error" in c: fail("error event")
    ids.add(c["id"])
    if c["object"] != kind: fail("object %s" % c["object"])
    if c.get("usage"):
        usage += 1
        u = c["usage"]
        if u["total_tokens"] != u["prompt_tokens"] + u["completion_tokens"]: fail("usage sums")
        continue
    ch = c["choices"][0]
    if ch["finish_reason"] is not None: finishes += 1
    if ch["finish_reason"] not in (None, "stop", "length", "tool_calls"): fail("finish_reason")
    d = ch.get("delta", {})
    text += d.get("content") or d.get("reasoning_content") or ch.get("text") or ""
if len(ids) != 1: fail("ids %s" % ids)
if finishes != 1: fail("%d finish reasons" % finishes)
if usage != (1 if want_usage else 0): fail("%d usage chunks" % usage)
if not text: fail("no text")
PY
}

url=$main_url
check "health 200" test "$(curl -s -o "$work/h" -w '%{http_code}' "$url/health")" = 200
check "models lists the model" test "$(curl -s -o "$work/m" -w '%{http_code}' "${auth[@]}" "$url/v1/models")" = 200
check "models body" json_check "$work/m" 'j["object"] == "list" and j["data"][0]["id"] == "nemotron-h-kjv"'

chat='{"model":"nemotron-h-kjv","messages":[{"role":"system","content":"Answer briefly."},{"role":"user","content":"Who made the light?"}],"max_tokens":24,"temperature":0}'
check "chat 200" test "$(post "$url/v1/chat/completions" "$chat" "$work/c1")" = 200
check "chat body" json_check "$work/c1" 'j["object"] == "chat.completion" and j["choices"][0]["message"]["role"] == "assistant" and j["choices"][0]["finish_reason"] in ("stop", "length") and j["usage"]["completion_tokens"] > 0 and "reasoning_content" in j["choices"][0]["message"]'
check "chat again, same text at temperature 0" test "$(post "$url/v1/chat/completions" "$chat" "$work/c2")" = 200
check "temperature 0 is deterministic" json_check "$work/c2" "j['choices'][0]['message'] == json.load(open('$work/c1'))['choices'][0]['message']"
seeded='{"messages":[{"role":"user","content":"Sing."}],"max_tokens":16,"temperature":1,"seed":7,"top_k":20,"top_p":0.9,"min_p":0.01,"presence_penalty":0.5,"frequency_penalty":0.5,"stop":["zzz"]}'
post "$url/v1/chat/completions" "$seeded" "$work/s1" >/dev/null
post "$url/v1/chat/completions" "$seeded" "$work/s2" >/dev/null
check "the same seed gives the same sample" json_check "$work/s2" "j['choices'][0]['message'] == json.load(open('$work/s1'))['choices'][0]['message']"

stream='{"messages":[{"role":"user","content":"Who made the light?"}],"max_tokens":20,"stream":true,"stream_options":{"include_usage":true},"chat_template_kwargs":{"enable_thinking":false}}'
check "chat stream 200" test "$(post "$url/v1/chat/completions" "$stream" "$work/st")" = 200
check "chat stream well formed" sse_check "$work/st" chat.completion.chunk usage

check "completion 200" test "$(post "$url/v1/completions" '{"prompt":"In the beginning","max_tokens":12,"temperature":0}' "$work/p1")" = 200
check "completion body" json_check "$work/p1" 'j["object"] == "text_completion" and len(j["choices"][0]["text"]) > 0 and j["usage"]["prompt_tokens"] > 0'
check "completion from ids 200" test "$(post "$url/v1/completions" '{"prompt":[1,422,1278],"max_tokens":5,"temperature":0,"stop":"\n\n"}' "$work/p2")" = 200
check "completion from ids body" json_check "$work/p2" 'j["usage"]["prompt_tokens"] == 3'
check "completion stream 200" test "$(post "$url/v1/completions" '{"prompt":"And God said","max_tokens":10,"stream":true}' "$work/p3")" = 200
check "completion stream well formed" sse_check "$work/p3" text_completion

# errors: status and OpenAI's shape
err_shape='set(j["error"]) == {"message", "type", "param", "code"} and j["error"]["message"]'
expect_error() { # expect_error STATUS DESCRIPTION CURL_ARGS...
    local status=$1 what=$2
    shift 2
    local got
    got=$(curl -s -o "$work/e" -w '%{http_code}' "$@")
    check "$what: status $got, expected $status" test "$got" = "$status"
    check "$what: error shape" json_check "$work/e" "$err_shape"
}
C=(-H 'Content-Type: application/json')
expect_error 400 "malformed JSON" "${auth[@]}" "${C[@]}" --data-binary '{"messages": [' "$url/v1/chat/completions"
expect_error 400 "wrongly typed field" "${auth[@]}" "${C[@]}" --data-binary '{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}' "$url/v1/chat/completions"
check "wrongly typed field: param named" json_check "$work/e" 'j["error"]["param"] == "temperature"'
expect_error 404 "unknown model" "${auth[@]}" "${C[@]}" --data-binary '{"model":"gpt-9","prompt":"x"}' "$url/v1/completions"
long=$(python3 -c 'print("[" + ",".join(["422"] * 1100) + "]")')
expect_error 400 "prompt longer than the context" "${auth[@]}" "${C[@]}" --data-binary "{\"prompt\":$long}" "$url/v1/completions"
check "context error code" json_check "$work/e" 'j["error"]["code"] == "context_length_exceeded"'
expect_error 401 "missing key" "${C[@]}" --data-binary '{"prompt":"x"}' "$url/v1/completions"
expect_error 401 "wrong key" -H "Authorization: Bearer $key-not" "${C[@]}" --data-binary '{"prompt":"x"}' "$url/v1/completions"
expect_error 401 "missing key on /v1/models" "$url/v1/models"
head -c $((9 << 20)) /dev/zero | tr '\0' 'a' >"$work/big"
expect_error 413 "body over the limit" "${auth[@]}" "${C[@]}" --data-binary @"$work/big" "$url/v1/completions"
expect_error 404 "unknown endpoint" "${auth[@]}" "$url/v1/nothing"

# two turns: the second prompt starts with the first's history, restored from the cache
turn1='{"messages":[{"role":"user","content":"Tell me of Noah and the ark, in a word."}],"max_tokens":12,"temperature":0}'
post "$url/v1/chat/completions" "$turn1" "$work/t1" >/dev/null
turn2=$(python3 - "$work/t1" <<'PY'
import json, sys
reply = json.load(open(sys.argv[1]))["choices"][0]["message"]
print(json.dumps({"messages": [{"role": "user", "content": "Tell me of Noah and the ark, in a word."},
                               {"role": "assistant", "content": reply["content"]},
                               {"role": "user", "content": "And then?"}], "max_tokens": 8, "temperature": 0}))
PY
)
check "second turn 200" test "$(post "$url/v1/chat/completions" "$turn2" "$work/t2")" = 200
# the first turn's prompt minus its generation prompt (a few tokens) comes from the cache
check "second turn reports the first turn as cached tokens" json_check "$work/t2" \
    "j['usage']['prompt_tokens_details']['cached_tokens'] >= json.load(open('$work/t1'))['usage']['prompt_tokens'] - 8 and j['usage']['prompt_tokens_details']['cached_tokens'] < j['usage']['prompt_tokens']"

# 16 concurrent streams, 6 of them cut off early by the client
cpids=()
for i in $(seq 16); do
    body="{\"messages\":[{\"role\":\"user\",\"content\":\"Client $i asks: who begat whom?\"}],\"max_tokens\":40,\"stream\":true,\"seed\":$i}"
    if [ "$i" -le 6 ]; then
        curl -s -N --max-time 0.$((2 + i % 3)) "${auth[@]}" "${C[@]}" --data-binary "$body" "$url/v1/chat/completions" >"$work/cc$i" 2>/dev/null &
    else
        curl -s -N "${auth[@]}" "${C[@]}" --data-binary "$body" "$url/v1/chat/completions" >"$work/cc$i" &
    fi
    cpids+=($!)
done
for p in "${cpids[@]}"; do wait "$p"; done
for i in $(seq 7 16); do check "concurrent stream $i well formed" sse_check "$work/cc$i" chat.completion.chunk; done
# the cut-off clients' slots come free: nothing queued or running a moment later
for _ in $(seq 50); do
    curl -s "${auth[@]}" "$url/metrics" >"$work/metrics"
    grep -q '^nemotron_slots_busy 0$' "$work/metrics" && grep -q '^nemotron_queue_length 0$' "$work/metrics" && break
    sleep 0.1
done
check "slots freed after disconnects" grep -q '^nemotron_slots_busy 0$' "$work/metrics"
check "queue empty" grep -q '^nemotron_queue_length 0$' "$work/metrics"
check "metrics count requests" grep -qE '^nemotron_requests_total [1-9][0-9]*$' "$work/metrics"
check "metrics count generated tokens" grep -qE '^nemotron_generated_tokens_total [1-9][0-9]*$' "$work/metrics"
check "metrics count prefix-cache hits" grep -qE '^nemotron_prefix_cache_hits_total [1-9][0-9]*$' "$work/metrics"
check "still healthy after the load" test "$(curl -s -o /dev/null -w '%{http_code}' "$url/health")" = 200

# speculative decoding: the same text as the plain server, per request on or off
check "no speculative metrics without --spec" bash -c "! grep -q speculative '$work/metrics'"
expect_error 400 "speculative on a server without it" "${auth[@]}" "${C[@]}" --data-binary '{"prompt":"x","speculative":true}' "$url/v1/completions"
check "speculative without --spec: param named" json_check "$work/e" 'j["error"]["param"] == "speculative"'
start_server spec --spec ngram --spec-max 8 --parallel 2 --ctx 1024 -t 1
start_server draft --draft-model "$model" --spec-max 6 --parallel 1 --ctx 1024 -t 1
passage="In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep."
rep=$(python3 -c 'import json, sys; print(json.dumps((sys.argv[1] + "\n") * 3 + "In the beginning God created"))' "$passage")
# with_spec BODY JSON_SUFFIX: BODY (an object) with the fields of JSON_SUFFIX added
with_spec() { printf '%s,%s}' "${1%\}}" "$2"; }
same_text() { # same_text FILE_A FILE_B: the choices' text or message are equal
    json_check "$2" "j['choices'][0].get('text', j['choices'][0].get('message')) == (lambda a: a['choices'][0].get('text', a['choices'][0].get('message')))(json.load(open('$1')))"
}
n=0
for body in "{\"prompt\":$rep,\"max_tokens\":60,\"temperature\":0}" \
    "{\"prompt\":$rep,\"max_tokens\":60,\"temperature\":0.8,\"seed\":7,\"top_k\":40,\"frequency_penalty\":0.3}" \
    '{"messages":[{"role":"user","content":"Who begat Enos?"}],"max_tokens":40,"temperature":0,"chat_template_kwargs":{"enable_thinking":false}}' \
    '{"messages":[{"role":"user","content":"Sing of the flood."}],"max_tokens":40,"temperature":0.8,"seed":7}'; do
    n=$((n + 1))
    case $body in *messages*) ep=chat/completions ;; *) ep=completions ;; esac
    post "$url/v1/$ep" "$body" "$work/plain$n" >/dev/null
    check "spec $n: the server's default (on) 200" test "$(post "$spec_url/v1/$ep" "$body" "$work/on$n")" = 200
    check "spec $n: --spec ngram gives the plain server's text" same_text "$work/plain$n" "$work/on$n"
    post "$spec_url/v1/$ep" "$(with_spec "$body" '"speculative":false')" "$work/off$n" >/dev/null
    check "spec $n: \"speculative\": false gives the same text" same_text "$work/plain$n" "$work/off$n"
    post "$spec_url/v1/$ep" "$(with_spec "$body" '"speculative":{"type":"ngram","max":3}')" "$work/k3$n" >/dev/null
    check "spec $n: {type ngram, max 3} gives the same text" same_text "$work/plain$n" "$work/k3$n"
    post "$draft_url/v1/$ep" "$body" "$work/draft$n" >/dev/null
    check "spec $n: --draft-model gives the same text" same_text "$work/plain$n" "$work/draft$n"
done
curl -s "$spec_url/metrics" >"$work/spec.metrics"
check "spec metrics: drafted tokens" grep -qE '^nemotron_speculative_drafted_tokens_total [1-9][0-9]*$' "$work/spec.metrics"
check "spec metrics: accepted tokens (a repeated passage)" grep -qE '^nemotron_speculative_accepted_tokens_total [1-9][0-9]*$' "$work/spec.metrics"
# 3 requests of 4 speculated (the fourth turned it off), times the 4 bodies
check "spec metrics: speculative requests counted" grep -qE '^nemotron_speculative_requests_total 8$' "$work/spec.metrics"
curl -s "$draft_url/metrics" >"$work/draft.metrics"
check "the model drafting for itself: every greedy draft accepted" python3 - "$work/draft.metrics" <<'PY'
import sys
m = dict(l.split() for l in open(sys.argv[1]) if l.startswith("nemotron_speculative_") and not l.startswith("#"))
sys.exit(0 if int(m["nemotron_speculative_drafted_tokens_total"]) >= int(m["nemotron_speculative_accepted_tokens_total"]) > 0 else 1)
PY
sbody="{\"prompt\":$rep,\"max_tokens\":40,\"temperature\":0,\"stream\":true}"
post "$url/v1/completions" "$sbody" "$work/plain.sse" >/dev/null
check "spec stream 200" test "$(post "$spec_url/v1/completions" "$sbody" "$work/spec.sse")" = 200
check "spec stream well formed" sse_check "$work/spec.sse" text_completion
sse_text() { python3 -c 'import json, sys; print("".join(json.loads(e[6:])["choices"][0]["text"] for e in open(sys.argv[1]).read().split("\n\n")[:-2] if json.loads(e[6:]).get("choices")))' "$1"; }
check "spec stream: the plain stream's text" test "$(sse_text "$work/spec.sse")" = "$(sse_text "$work/plain.sse")"
expect_error 400 "speculative: draft without a draft model" "${C[@]}" --data-binary '{"prompt":"x","speculative":{"type":"draft"}}' "$spec_url/v1/completions"
check "draft without a draft model: param" json_check "$work/e" 'j["error"]["param"] == "speculative.type"'
expect_error 400 "speculative.max past --spec-max" "${C[@]}" --data-binary '{"prompt":"x","speculative":{"max":9}}' "$spec_url/v1/completions"
check "speculative.max past --spec-max: param" json_check "$work/e" 'j["error"]["param"] == "speculative.max"'
expect_error 400 "speculative.max 0" "${C[@]}" --data-binary '{"prompt":"x","speculative":{"max":0}}' "$spec_url/v1/completions"
expect_error 400 "speculative.type foo" "${C[@]}" --data-binary '{"prompt":"x","speculative":{"type":"foo"}}' "$spec_url/v1/completions"
expect_error 400 "speculative: a string" "${C[@]}" --data-binary '{"prompt":"x","speculative":"ngram"}' "$spec_url/v1/completions"
expect_error 400 "speculative: mtp on a server without it" "${C[@]}" --data-binary '{"prompt":"x","speculative":{"type":"mtp"}}' "$spec_url/v1/completions"
check "mtp on a server without it: param and the option to start with" \
    json_check "$work/e" 'j["error"]["param"] == "speculative.type" and "--spec mtp" in j["error"]["message"]'
kill -TERM "$spec_pid" "$draft_pid"
wait "$spec_pid" "$draft_pid"
check "no sanitizer report or crash in the speculative servers' logs" bash -c "! grep -qiE 'sanitizer|runtime error|segmentation|abort' '$work/spec.log' '$work/draft.log'"
# bad flags stop the server before it listens
serve_refused() { # serve_refused DESCRIPTION PATTERN ARGS...
    local what=$1 pattern=$2
    shift 2
    timeout 20 "$bin" serve -m "$model" --port "$(free_port)" "$@" >"$work/refused.log" 2>&1
    local rc=$?
    check "serve $what: exit $rc, expected 1 or 2" test "$rc" = 1 -o "$rc" = 2
    check "serve $what: '$pattern' not in: $(head -1 "$work/refused.log")" grep -q -- "$pattern" "$work/refused.log"
}
serve_refused "--spec foo" "spec 'foo'" --spec foo
model=models/nemotron-h-kjv-draft serve_refused "--spec mtp on a model without MTP layers" \
    "spec mtp: the model models/nemotron-h-kjv-draft has no MTP layers" --spec mtp
serve_refused "--spec mtp with --draft-model" "spec mtp and --draft-model: one drafter at a time" --spec mtp --draft-model "$model"
serve_refused "--spec-max 0" "spec-max: '0'" --spec ngram --spec-max 0
serve_refused "--spec-max without a drafter" "speculation is off" --spec-max 4
make_model="$(dirname "$bin")/make_model"
[ -x "$make_model" ] || make_model=build/make_model
if "$make_model" "$work/tiny" --shape tiny --seed 3 >"$work/make.log" 2>&1; then
    serve_refused "a draft model of another vocabulary" "vocabulary has 256 tokens, the model's 4096" --draft-model "$work/tiny"
else
    check "make_model: $(cat "$work/make.log")" false
fi

# --spec mtp: the MTP fixture's own step drafts (random weights: its drafts rarely land, so the
# verify steps that reject them are what runs); the text is the plain server's
mtp_model "$work/mtp" || check "mtp_model made the MTP fixture a tokenizer" false
model="$work/mtp" start_server mtpplain --parallel 1 --ctx 512 -t 1
model="$work/mtp" start_server mtp --spec mtp --spec-max 4 --parallel 2 --ctx 512 -t 1
# (the line follows /health's 200 by a moment: the main thread writes it once the load ends)
for _ in $(seq 50); do grep -q 'nemotron serve: ready' "$work/mtp.log" && break; sleep 0.1; done
check "mtp: the startup line names the drafter" grep -q 'speculative decoding (mtp, up to 4 drafts)' "$work/mtp.log"
n=0
for body in '{"prompt":"In the beginning God created","max_tokens":40,"temperature":0}' \
    '{"prompt":[1,45,300,90,77,12,99],"max_tokens":40,"temperature":0}' \
    '{"prompt":"And the earth was","max_tokens":40,"temperature":0.8,"seed":7,"top_k":40}' \
    '{"messages":[{"role":"user","content":"Who begat Enos?"}],"max_tokens":30,"temperature":0,"chat_template_kwargs":{"enable_thinking":false}}'; do
    n=$((n + 1))
    case $body in *messages*) ep=chat/completions ;; *) ep=completions ;; esac
    check "mtp $n: the plain server 200" test "$(post "$mtpplain_url/v1/$ep" "$body" "$work/mplain$n")" = 200
    check "mtp $n: the --spec mtp server 200" test "$(post "$mtp_url/v1/$ep" "$body" "$work/mtp$n")" = 200
    check "mtp $n: --spec mtp gives the plain server's text" same_text "$work/mplain$n" "$work/mtp$n"
    for field in '"speculative":{"type":"mtp","max":2}' '"speculative":{"type":"ngram"}' '"speculative":false'; do
        post "$mtp_url/v1/$ep" "$(with_spec "$body" "$field")" "$work/mfield$n" >/dev/null
        check "mtp $n: $field gives the same text" same_text "$work/mplain$n" "$work/mfield$n"
    done
done
sbody='{"prompt":"In the beginning God created","max_tokens":40,"temperature":0,"stream":true}'
post "$mtpplain_url/v1/completions" "$sbody" "$work/mplain.sse" >/dev/null
check "mtp stream 200" test "$(post "$mtp_url/v1/completions" "$sbody" "$work/mtp.sse")" = 200
check "mtp stream well formed" sse_check "$work/mtp.sse" text_completion
check "mtp stream: the plain stream's text" test "$(sse_text "$work/mtp.sse")" = "$(sse_text "$work/mplain.sse")"
curl -s "$mtp_url/metrics" >"$work/mtp.metrics"
# the default, "mtp" and "ngram" of the 4 bodies, and the stream
check "mtp metrics: speculative requests counted" grep -qE '^nemotron_speculative_requests_total 13$' "$work/mtp.metrics"
check "mtp metrics: the MTP step drafted" grep -qE '^nemotron_speculative_drafted_tokens_total [1-9][0-9]*$' "$work/mtp.metrics"
kill -TERM "$mtp_pid" "$mtpplain_pid"
wait "$mtp_pid" "$mtpplain_pid"
check "no sanitizer report or crash in the mtp servers' logs" bash -c "! grep -qiE 'sanitizer|runtime error|segmentation|abort' '$work/mtp.log' '$work/mtpplain.log'"

# a full queue: one slot busy with a long stream, one request waiting, the next refused. The
# stream must outlast the openai package's check below as well (node's start included): 3,000
# tokens took ~1 s on a quiet machine and once ended first, so 16,000 (the streams end with the
# server's SIGTERM below, not by themselves)
start_server small --parallel 1 --queue 1 --ctx 16384 -t 1
slow='{"prompt":"In the beginning","max_tokens":16000,"stream":true,"temperature":0.8}'
curl -s -N "${C[@]}" --data-binary "$slow" "$small_url/v1/completions" >"$work/slow1" &
pids+=($!)
slow1=$!
for _ in $(seq 50); do curl -s "$small_url/metrics" | grep -q '^nemotron_slots_busy 1$' && break; sleep 0.1; done
curl -s -N "${C[@]}" --data-binary "$slow" "$small_url/v1/completions" >"$work/slow2" &
pids+=($!)
for _ in $(seq 50); do curl -s "$small_url/metrics" | grep -q '^nemotron_queue_length 1$' && break; sleep 0.1; done
expect_error 429 "full queue" "${C[@]}" --data-binary '{"prompt":"x","max_tokens":2}' "$small_url/v1/completions"

# the official openai npm package (tests/openai/package.json pins it; scripts/setup.sh installs it)
# against both servers, while this one's queue is still full
if [ -f tests/openai/node_modules/openai/package.json ] && command -v node >/dev/null; then
    check "the openai package's checks" env NEMOTRON_URL="$url" NEMOTRON_KEY="$key" NEMOTRON_FULL_URL="$small_url" \
        node tests/openai/serve_test.mjs
else
    check "the openai package is not installed (tests/openai/node_modules): run scripts/setup.sh" false
fi

# SIGTERM while a stream runs: exit 0 within 5 s, the stream ends with an error event and [DONE]
start=$(date +%s%N)
kill -TERM "$small_pid"
for _ in $(seq 100); do kill -0 "$small_pid" 2>/dev/null || break; sleep 0.05; done
wait "$small_pid"
rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
check "SIGTERM: exit status $rc" test "$rc" = 0
check "SIGTERM: exit in $ms ms (< 5000)" test "$ms" -lt 5000
wait "$slow1"
check "the running stream ends with [DONE]" grep -q '^data: \[DONE\]$' "$work/slow1"

kill -TERM "$main_pid"
wait "$main_pid"
check "main server: clean exit" test $? = 0
check "no sanitizer report or crash in the server logs" bash -c "! grep -qiE 'sanitizer|runtime error|segmentation|abort' '$work/main.log' '$work/small.log'"

checks_summary
