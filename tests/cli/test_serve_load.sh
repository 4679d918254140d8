#!/usr/bin/env bash
# test_serve_load.sh - `nemotron serve` under load (issue 15 item 4): 32 concurrent streaming
# clients for a bounded time, each sending chat and completion requests one after another and
# hanging up at random on about a third of them (before the answer, after a few events, in the
# middle of the stream). Must hold: every request the client did not cut off is a 200 whose stream
# is well formed (only "data: " events, JSON chunks of one id, one finish reason, "data: [DONE]"
# last); no 5xx; afterwards no slot busy and no request queued, /health 200, a plain request
# still answered; SIGTERM exits 0 within 5 s, with no sanitizer report (under `make asan` the
# server is the ASan build: a leak or a race on a hang-up shows in its log and exit status).
#
# Time: SERVE_LOAD_SECONDS of load (default 8; 60 in the full tier, NEMOTRON_TEST_FULL=1).
# usage (from the repository root): bash tests/cli/test_serve_load.sh build/nemotron
suite=serve_load
. "$(dirname "$0")/checks.sh"
default_seconds=8
[ "${NEMOTRON_TEST_FULL:-0}" != 0 ] && default_seconds=60
seconds=${SERVE_LOAD_SECONDS:-$default_seconds}
if ! command -v curl >/dev/null; then echo "FAIL serve load: curl is missing (scripts/setup.sh installs it)" >&2; exit 1; fi

port=$(free_port)
url=http://127.0.0.1:$port
"$bin" serve -m "$model" --port "$port" --parallel 4 --queue 64 --ctx 1024 -t 1 >"$work/server.log" 2>&1 &
pid=$!
pids+=("$pid")
for _ in $(seq 300); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/health")" = 200 ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
if [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/health")" != 200 ]; then
    echo "FAIL serve load: the server did not become healthy:" >&2
    cat "$work/server.log" >&2
    exit 1
fi

# the clients: one thread each; prints a summary line and exits non-zero on any bad answer
check "32 clients for $seconds s: every uncut stream well formed, no server error" python3 - "$port" "$seconds" <<'PY'
import http.client, json, random, sys, threading, time
port, seconds = int(sys.argv[1]), float(sys.argv[2])
deadline = time.monotonic() + seconds
lock = threading.Lock()
counts = {"complete": 0, "cut": 0, "bad": 0}
problems = []

def bad(what):
    with lock:
        counts["bad"] += 1
        if len(problems) < 10: problems.append(what)

def well_formed(raw, kind):
    """None, or what is wrong with a finished stream."""
    if not raw.endswith("data: [DONE]\n\n"): return "does not end with data: [DONE]"
    events = raw.split("\n\n")[:-1]
    ids, finishes = set(), 0
    for ev in events[:-1]:
        if not ev.startswith("data: ") or "\n" in ev: return "malformed event %r" % ev[:80]
        c = json.loads(ev[6:])
        if "error" in c: return "error event %r" % ev[:200]
        if c.get("object") != kind: return "object %r" % c.get("object")
        ids.add(c["id"])
        if c.get("usage"): continue
        fr = c["choices"][0]["finish_reason"]
        if fr is not None:
            finishes += 1
            if fr not in ("stop", "length"): return "finish_reason %r" % fr
    if len(ids) != 1: return "ids %s" % ids
    if finishes != 1: return "%d finish reasons" % finishes
    return None

def client(i):
    rng = random.Random(1000 + i)
    n = 0
    while time.monotonic() < deadline:
        n += 1
        chat = rng.random() < 0.5
        body = {"max_tokens": rng.randint(4, 48), "stream": True, "seed": rng.randint(0, 1 << 30),
                "temperature": 0.8, "stream_options": {"include_usage": rng.random() < 0.5}}
        if chat:
            body["messages"] = [{"role": "user", "content": "Client %d, request %d: who begat whom?" % (i, n)}]
            path, kind = "/v1/chat/completions", "chat.completion.chunk"
        else:
            body["prompt"] = "And it came to pass, client %d" % i
            path, kind = "/v1/completions", "text_completion"
        # a third hang up: before reading anything, or after some events
        cut = rng.random() < 1 / 3
        cut_after = rng.choice([0, 0, 1, 2, 5, 10, 20]) if cut else None
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            if cut_after == 0:
                conn.close()
                with lock: counts["cut"] += 1
                continue
            r = conn.getresponse()
            if r.status != 200:
                bad("status %d: %s" % (r.status, r.read()[:200]))
                conn.close()
                continue
            raw, events = b"", 0
            while True:
                chunk = r.read1(4096) if hasattr(r, "read1") else r.read(64)
                if not chunk: break
                raw += chunk
                events = raw.count(b"\n\n")
                if cut_after is not None and events >= cut_after: break
            if cut_after is not None and events >= cut_after and not raw.endswith(b"data: [DONE]\n\n"):
                conn.close()
                with lock: counts["cut"] += 1
                continue
            conn.close()
            why = well_formed(raw.decode("utf-8"), kind)
            if why: bad(why)
            else:
                with lock: counts["complete"] += 1
        except Exception as e:
            bad("%s: %s" % (type(e).__name__, e))
            conn.close()

threads = [threading.Thread(target=client, args=(i,)) for i in range(32)]
for t in threads: t.start()
for t in threads: t.join()
print("  32 clients, %.0f s: %d complete streams, %d cut off by the client, %d bad" %
      (seconds, counts["complete"], counts["cut"], counts["bad"]))
for p in problems: print("  bad: " + p, file=sys.stderr)
sys.exit(0 if counts["bad"] == 0 and counts["complete"] > 0 and counts["cut"] > 0 else 1)
PY

# the slots and the queue come free (a cut-off job stops at its next step)
for _ in $(seq 100); do
    curl -s "$url/metrics" >"$work/metrics"
    grep -q '^nemotron_slots_busy 0$' "$work/metrics" && grep -q '^nemotron_queue_length 0$' "$work/metrics" && break
    sleep 0.1
done
check "slots freed" grep -q '^nemotron_slots_busy 0$' "$work/metrics"
check "queue empty" grep -q '^nemotron_queue_length 0$' "$work/metrics"
check "health 200 after the load" test "$(curl -s -o /dev/null -w '%{http_code}' "$url/health")" = 200
check "a request after the load" test "$(curl -s -o "$work/after" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary '{"prompt":"In the beginning","max_tokens":4}' "$url/v1/completions")" = 200
start=$(date +%s%N)
kill -TERM "$pid"
wait "$pid"
rc=$?
pids=()
ms=$((($(date +%s%N) - start) / 1000000))
check "SIGTERM: exit status $rc (a sanitizer's report makes it non-zero)" test "$rc" = 0
check "SIGTERM: exit in $ms ms (< 5000)" test "$ms" -lt 5000
check "no sanitizer report or crash in the server log" bash -c "! grep -qiE 'sanitizer|runtime error|segmentation|abort' '$work/server.log'"
[ "$failed" -eq 0 ] || tail -30 "$work/server.log" >&2

checks_summary
