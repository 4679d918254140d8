#!/usr/bin/env bash
# serve_bench.sh - load figures of `nemotron serve` (issue 15 item 4) in one call, for docs/PERF.md.
#
#   dev/serve/serve_bench.sh MODEL OUTDIR [--device cuda] [--parallel 4] [--quick]
#
# MODEL: a model directory or .nemo; `nano` means /tmp/nano-default.nemo and `mid` /tmp/mid.nemo,
# both synthesized when absent (as tests/gpu/run.sh makes Nano). A model without a tokenizer (every
# synthetic one) is served with the demo model's, padded to the model's vocabulary
# (dev/serve/pad_tokenizer.py says why). Needs python3 and build/nemotron; nothing is installed
# and the network is not used. Steps, each logged to OUTDIR:
#   1. `nemotron serve -m MODEL --device D --parallel N` on a free port (prefix cache on, the
#      default 1024 MiB), waited for until /health answers 200 (503 while the model loads);
#   2. a 10-turn chat (tools/serve_bench.py chat: prompt tokens, cached, time to first token);
#   3. 1, 8 and 32 concurrent streaming clients (tools/serve_bench.py load);
#   4. wrk, when build/vcarry/wrk/wrk (dev/serve/carry_wrk.sh) or a wrk on PATH runs: requests/s of
#      a fixed small POST /v1/completions and of GET /v1/models with 1, 8 and 32 connections;
#   5. the server stopped (SIGTERM; its exit status checked), started again with --cache-ram 0,
#      and the 10-turn chat repeated: the same turns without the prefix cache.
# OUTDIR/summary.md gathers the tables in docs/PERF.md's shapes, the machine, and each step's
# seconds. --quick (the GPU machine's mode: under 4 minutes with Nano) sends fewer requests and
# runs wrk 4 s per point instead of 10. The server is always stopped at exit (trap). Exits 1 when
# a server failed to start, died, exited badly, or a request failed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

usage() { echo "usage: dev/serve/serve_bench.sh MODEL OUTDIR [--device cuda] [--parallel 4] [--quick]" >&2; exit 2; }
[ $# -ge 2 ] || usage
model=$1 out=$2
shift 2
device=cpu parallel=4 quick=0
while [ $# -gt 0 ]; do
    case $1 in
    --device) [ $# -ge 2 ] || usage; device=$2; shift 2 ;;
    --parallel) [ $# -ge 2 ] || usage; parallel=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    *) usage ;;
    esac
done
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
bin=build/nemotron
bench=tools/serve_bench.py
[ -x $bin ] || { echo "serve_bench.sh: no $bin (make cpu, or carry the GPU build)" >&2; exit 1; }
# a carried GPU build loads its libraries from build/gpu-libs (make gpu-bundle)
[ -d build/gpu-libs ] && export LD_LIBRARY_PATH=$PWD/build/gpu-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

if [ $quick = 1 ]; then
    requests="1:4 8:2 32:1"   # clients:requests per client
    wrk_seconds=4
    step_limit=60              # seconds a chat or a load point may take before it counts as failed
else
    requests="1:8 8:4 32:2"
    wrk_seconds=10
    step_limit=300
fi
chat_tokens=24   # as the CPU figures in docs/PERF.md
load_tokens=64

status=0
fail() { echo "serve_bench.sh: $*" | tee -a "$out/failures.txt" >&2; status=1; }
steps=()
step_start=$SECONDS
step_done() { steps+=("| $1 | $((SECONDS - step_start)) |"); step_start=$SECONDS; }

# ---- the model ----
case $model in
nano) model=/tmp/nano-default.nemo ;;
mid) model=/tmp/mid.nemo ;;
esac
# the synthetic models at the paths tests/gpu/run.sh and docs/PERF.md use are made when absent
shape=
case $model in
/tmp/nano-default.nemo) shape=nemotron-3-nano-30b-a3b ;;
/tmp/mid.nemo) shape=mid ;;
esac
if [ ! -e "$model" ] && [ -n "$shape" ]; then
    $bin synth --shape $shape -o "$model" >"$out/synth.log" 2>&1 || { cat "$out/synth.log"; exit 1; }
    step_done "synth --shape $shape"
fi
[ -e "$model" ] || { echo "serve_bench.sh: no model $model" >&2; exit 1; }
tokenizer=()
scratch=
if ! echo probe | $bin tokenize --tokenizer "$model" >/dev/null 2>&1; then
    # outside OUTDIR: 2.4 MB for Nano, remade in a second
    scratch=$(mktemp -d)
    python3 dev/serve/pad_tokenizer.py "$model" models/nemotron-h-kjv "$scratch/tokenizer.json" >"$out/tokenizer.log" 2>&1 ||
        { cat "$out/tokenizer.log"; rm -rf "$scratch"; exit 1; }
    tokenizer=(--tokenizer "$scratch/tokenizer.json")
fi

# ---- the summary (also written when the bench is stopped by a signal) ----
chat_table() { # the two chats side by side, as docs/PERF.md shows them
    echo "| turn | prompt tokens | evaluated, cache on | TTFT ms, cache on | evaluated, cache off | TTFT ms, cache off |"
    echo "|---|---|---|---|---|---|"
    # serve_bench.py chat's rows: | turn | prompt tokens | cached | evaluated | time to first token |
    python3 - "$out/chat-cache-on.md" "$out/chat-cache-off.md" <<'EOF'
import sys
def rows(path):
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return {}
    cells = [[c.strip() for c in l.strip("|").split("|")] for l in lines if l[:3].strip("| ").isdigit()]
    return {c[0]: c for c in cells}
on, off = rows(sys.argv[1]), rows(sys.argv[2])
missing = ["", "-", "-", "-", "-"]
for turn in sorted(set(on) | set(off), key=int):
    a, b = on.get(turn, missing), off.get(turn, missing)
    print("| %s | %s | %s | %s | %s | %s |" % (turn, a[1] if a[1] != "-" else b[1], a[3], a[4], b[3], b[4]))
EOF
}
write_summary() {
    {
        echo "# nemotron serve, $(basename "$model"), --device $device --parallel $parallel$([ $quick = 1 ] && echo ", --quick")"
        echo
        echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
        echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')$(
            command -v nvidia-smi >/dev/null && echo "; GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)")"
        echo "- model: $model$([ ${#tokenizer[@]} -gt 0 ] && echo " (no tokenizer of its own: $(tail -1 "$out/tokenizer.log"))")"
        echo "- chat: max_tokens $chat_tokens, temperature 0, reasoning off; load: max_tokens $load_tokens, temperature 0.7,"
        echo "  requests per client (clients:requests) $requests; wrk: ${wrk_seconds} s per point"
        echo
        echo "## 10-turn chat, prefix cache on and off"
        echo
        chat_table
        echo
        echo "## Concurrent streaming clients ($parallel slots)"
        echo
        cat "$out/load.md" 2>/dev/null
        echo
        echo "## wrk"
        echo
        cat "$out/wrk.md" 2>/dev/null
        echo
        echo "## Steps (seconds)"
        echo
        echo "| step | s |"
        echo "|---|---|"
        printf '%s\n' "${steps[@]}"
        echo
        echo "total: $SECONDS s; $([ $status = 0 ] && echo "no failure" || echo "FAILURES: $(tr '\n' ' ' <"$out/failures.txt")")"
    } >"$out/summary.md"
    cat "$out/summary.md"
}

# ---- the server ----
pid=
url=
stop_server() { # SIGTERM, up to 10 s (the server promises 5), then SIGKILL; 1 when it exited badly
    [ -n "$pid" ] || return 0
    local rc=0
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            kill -KILL "$pid"
            echo "killed: no exit within 10 s of SIGTERM" >>"$out/server-$name.log"
            rc=1
        fi
    else
        echo "the server was not running any more when the bench ended" >>"$out/server-$name.log"
        rc=1
    fi
    wait "$pid" || rc=1
    pid=
    return $rc
}
trap 'stop_server; fail "stopped by a signal"; write_summary; exit 1' INT TERM
trap 'stop_server; [ -n "$scratch" ] && rm -rf "$scratch"' EXIT
start_server() { # start_server NAME EXTRA_ARGS...: 0 once /health is 200
    name=$1
    shift
    local port
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    url=http://127.0.0.1:$port
    echo "$bin serve -m $model --device $device --parallel $parallel --port $port ${tokenizer[*]} $*" >"$out/server-$name.log"
    $bin serve -m "$model" --device "$device" --parallel "$parallel" --port "$port" "${tokenizer[@]}" "$@" \
        >>"$out/server-$name.log" 2>&1 &
    pid=$!
    python3 $bench wait "$url" --pid "$pid" --timeout 200 >"$out/wait-$name.log" 2>&1
}

# ---- 1-4: prefix cache on ----
if ! start_server cache-on; then
    fail "the server did not start: $(cat "$out/wait-cache-on.log"); $(tail -2 "$out/server-cache-on.log" | tr '\n' ' ')"
    write_summary
    exit 1
fi
step_done "server load (cache on): $(cat "$out/wait-cache-on.log")"
timeout $step_limit python3 $bench chat "$url" --turns 10 --max-tokens $chat_tokens >"$out/chat-cache-on.md" 2>&1 ||
    fail "chat, cache on: $(tail -1 "$out/chat-cache-on.md")"
step_done "10-turn chat, cache on"
: >"$out/load.md"
for r in $requests; do
    c=${r%:*} n=${r#*:}
    timeout $step_limit python3 $bench load "$url" --clients "$c" --requests "$n" --max-tokens $load_tokens >"$out/load-$c.md" 2>&1 ||
        fail "load, $c clients: $(tail -1 "$out/load-$c.md")"
    grep -q "requests failed" "$out/load-$c.md" && fail "load, $c clients: $(grep "requests failed" "$out/load-$c.md")"
    # one table: the first call's header, every call's row
    if [ -s "$out/load.md" ]; then grep '^| [0-9]' "$out/load-$c.md" >>"$out/load.md"; else cat "$out/load-$c.md" >>"$out/load.md"; fi
done
step_done "load: 1, 8 and 32 clients"

wrk=
if [ -x build/vcarry/wrk/wrk ]; then
    banner=$(LD_LIBRARY_PATH=$PWD/build/vcarry/wrk${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} build/vcarry/wrk/wrk -v 2>&1 || true)
    [[ $banner == wrk* ]] && wrk=build/vcarry/wrk/wrk
fi
[ -z "$wrk" ] && command -v wrk >/dev/null && wrk=$(command -v wrk)
wrk_row() { # wrk_row LABEL CONNECTIONS LOG: one row of the wrk table from wrk --latency's output
    awk -v label="$1" -v c="$2" '
        $1 == "Requests/sec:" { rps = $2 }
        $1 == "50%" { p50 = $2 } $1 == "99%" { p99 = $2 }
        /requests in/ { n = $1 }
        /Non-2xx/ { bad = $NF }
        /Socket errors/ { sub(/.*Socket errors: /, ""); errs = $0 }
        END { printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", label, c, n, rps, p50, p99, bad + 0, errs == "" ? "none" : errs }
    ' "$3"
}
if [ -n "$wrk" ]; then
    cat >"$out/completion.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"prompt": "In the beginning God created", "max_tokens": 8, "temperature": 0}'
EOF
    {
        echo "| request | connections | requests | requests/s | latency p50 | latency p99 | non-2xx | socket errors |"
        echo "|---|---|---|---|---|---|---|---|"
    } >"$out/wrk.md"
    for what in completions models; do
        for c in 1 8 32; do
            threads=$((c < 4 ? c : 4))
            log=$out/wrk-$what-$c.log
            if [ $what = completions ]; then
                args=(-s "$out/completion.lua" "$url/v1/completions")
                label="POST /v1/completions, 8 tokens"
            else
                args=("$url/v1/models")
                label="GET /v1/models"
            fi
            LD_LIBRARY_PATH=$PWD/build/vcarry/wrk${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
                timeout $((wrk_seconds + 30)) "$wrk" -t $threads -c $c -d ${wrk_seconds}s --timeout 30s --latency "${args[@]}" \
                >"$log" 2>&1 || fail "wrk $what -c $c: $(tail -1 "$log")"
            wrk_row "$label" $c "$log" >>"$out/wrk.md"
        done
    done
    step_done "wrk: 2 requests x 3 connection counts x ${wrk_seconds} s"
else
    echo "no wrk (dev/serve/carry_wrk.sh carries one in build/vcarry/wrk)" >"$out/wrk.md"
fi
fetch_metrics() { python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1] + "/metrics").read().decode())' "$url"; }
fetch_metrics >"$out/metrics-cache-on.txt" 2>&1
stop_server || fail "the server (cache on) did not stop cleanly: $(tail -2 "$out/server-cache-on.log" | tr '\n' ' ')"
step_done "server stopped"

# ---- 5: prefix cache off ----
if start_server cache-off --cache-ram 0; then
    step_done "server load (cache off): $(cat "$out/wait-cache-off.log")"
    timeout $step_limit python3 $bench chat "$url" --turns 10 --max-tokens $chat_tokens >"$out/chat-cache-off.md" 2>&1 ||
        fail "chat, cache off: $(tail -1 "$out/chat-cache-off.md")"
    step_done "10-turn chat, cache off"
    stop_server || fail "the server (cache off) did not stop cleanly: $(tail -2 "$out/server-cache-off.log" | tr '\n' ' ')"
else
    fail "the server (cache off) did not start: $(cat "$out/wait-cache-off.log")"
fi

write_summary
exit $status
