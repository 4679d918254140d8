#!/usr/bin/env python3
"""serve_bench.py - timings of a running `nemotron serve`, from the client's side (stdlib only).

    tools/serve_bench.py chat URL [--turns 10]            a multi-turn chat: per turn, the prompt
                                                          tokens, how many came from the prefix
                                                          cache, and the time to the first token
    tools/serve_bench.py load URL [--clients 1,8,32]      concurrent streaming clients: requests/s,
                                                          aggregate tokens/s, p50/p99 time to first
                                                          token and gap between tokens
    tools/serve_bench.py wait URL [--timeout S] [--pid P] until /health answers 200 (the server
                                                          answers 503 while it loads); exit 1 when
                                                          process P ended or S seconds passed

Every streamed event is timestamped as it arrives (http.client, one thread per client). The
time to first token is from sending the request to the first event that carries text; a gap is
the time between two such events. Prints Markdown tables (docs/PERF.md holds the results).
"""
import argparse
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse


def stream_chat(url, key, body):
    """Posts a streamed chat request; returns (send time, [event times with text], usage, text)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    body = dict(body, stream=True, stream_options={"include_usage": True})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError("status %d: %s" % (resp.status, resp.read()[:200]))
    times, usage, text = [], None, ""
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        chunk = json.loads(data)
        if chunk.get("usage"):
            usage = chunk["usage"]
        for ch in chunk.get("choices", []):
            d = ch.get("delta", {})
            piece = d.get("content") or d.get("reasoning_content")
            if piece:
                times.append(time.perf_counter())
                text += piece
    conn.close()
    return t0, times, usage, text


def pct(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def chat(args):
    messages = [{"role": "system", "content": "You answer in the words of the King James Bible."}]
    print("| turn | prompt tokens | cached | evaluated | time to first token (ms) |")
    print("|---|---|---|---|---|")
    for turn in range(1, args.turns + 1):
        messages.append({"role": "user", "content": "Question %d: what did the Lord say unto Moses?" % turn})
        body = {"messages": messages, "max_tokens": args.max_tokens, "temperature": 0,
                "chat_template_kwargs": {"enable_thinking": False}}
        t0, times, usage, text = stream_chat(args.url, args.key, body)
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        print("| %d | %d | %d | %d | %.1f |" % (turn, usage["prompt_tokens"], cached, usage["prompt_tokens"] - cached,
                                                (times[0] - t0) * 1e3 if times else float("nan")))
        messages.append({"role": "assistant", "content": text})


def load(args):
    print("| clients | requests | requests/s | tokens/s | TTFT p50 (ms) | TTFT p99 (ms) | gap p50 (ms) | gap p99 (ms) |")
    print("|---|---|---|---|---|---|---|---|")
    for n in [int(c) for c in args.clients.split(",")]:
        ttft, gaps, tokens, errors = [], [], [0], []
        lock = threading.Lock()

        def client(i):
            for r in range(args.requests):
                body = {"messages": [{"role": "user", "content": "Client %d, request %d: who begat Enoch?" % (i, r)}],
                        "max_tokens": args.max_tokens, "temperature": 0.7, "seed": i * 1000 + r,
                        "chat_template_kwargs": {"enable_thinking": False}}
                try:
                    t0, times, usage, _ = stream_chat(args.url, args.key, body)
                except Exception as e:  # counted and shown: a load test reports its failures
                    with lock:
                        errors.append(str(e))
                    continue
                with lock:
                    if times:
                        ttft.append(times[0] - t0)
                        gaps.extend(b - a for a, b in zip(times, times[1:]))
                    tokens[0] += usage["completion_tokens"]

        start = time.perf_counter()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start
        done = n * args.requests - len(errors)
        print("| %d | %d | %.2f | %.1f | %.1f | %.1f | %.2f | %.2f |" % (
            n, done, done / wall, tokens[0] / wall, pct(ttft, 50) * 1e3, pct(ttft, 99) * 1e3,
            pct(gaps, 50) * 1e3, pct(gaps, 99) * 1e3))
        if errors:
            print("  %d requests failed, e.g. %s" % (len(errors), errors[0]))


def wait(args):
    u = urllib.parse.urlparse(args.url)
    start = time.perf_counter()
    while True:
        try:
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=5)
            conn.request("GET", "/health")
            status = conn.getresponse().status
            conn.close()
        except OSError:  # not listening yet
            status = None
        waited = time.perf_counter() - start
        if status == 200:
            print("ready after %.1f s" % waited)
            return 0
        if args.pid:
            try:
                os.kill(args.pid, 0)
            except ProcessLookupError:
                print("process %d ended after %.1f s (last /health: %s)" % (args.pid, waited, status))
                return 1
        if waited > args.timeout:
            print("not ready after %.1f s (last /health: %s)" % (waited, status))
            return 1
        time.sleep(0.25)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["chat", "load", "wait"])
    ap.add_argument("url", help="the server, e.g. http://127.0.0.1:8080")
    ap.add_argument("--key", help="the API key, when the server wants one")
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--clients", default="1,8,32")
    ap.add_argument("--requests", type=int, default=4, help="requests per client (load)")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=300, help="seconds to wait for /health (wait)")
    ap.add_argument("--pid", type=int, help="the server's process: stop waiting when it ends (wait)")
    args = ap.parse_args()
    if args.mode == "wait":
        sys.exit(wait(args))
    chat(args) if args.mode == "chat" else load(args)


if __name__ == "__main__":
    main()
