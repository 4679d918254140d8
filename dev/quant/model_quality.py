#!/usr/bin/env python3
"""model_quality.py - next-token agreement of quantized models with the unquantized one.

    dev/quant/model_quality.py --ref MODEL [--text FILE | --random V] [--windows W] [--len L]
                               NAME=MODEL ...

Runs `build/nemotron logits` on W windows of L tokens, for the reference and each candidate
(a model directory or a .nemo), and prints one markdown row per candidate: top-1 agreement of
the next-token argmax with the reference's, the mean KL(ref || candidate) of the next-token
distributions in nats, and the relative L2 error of the logits. --text takes the windows evenly
spread over a text file (tokenized with the reference's tokenizer); --random V draws token ids
below V with a fixed seed (the random-weight fixtures have no text of their own). numpy only.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

BIN = os.environ.get("NEMOTRON", "build/nemotron")


def logits(model, ids, out):
    subprocess.run([BIN, "logits", "-m", model, "--tokens", ",".join(map(str, ids)), "-o", out],
                   check=True, stderr=subprocess.DEVNULL)
    return np.load(out).astype(np.float64)


def logp(x):
    x = x - x.max(1, keepdims=True)
    return x - np.log(np.exp(x).sum(1, keepdims=True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", required=True)
    ap.add_argument("--text")
    ap.add_argument("--random", type=int)
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--len", type=int, default=128)
    ap.add_argument("candidates", nargs="+")
    a = ap.parse_args()
    if a.text:
        with open(a.text, "rb") as f:
            text = f.read()
        tok = subprocess.run([BIN, "tokenize", "--tokenizer", a.ref], input=text, check=True,
                             capture_output=True).stdout
        ids = json.loads(tok)
        if len(ids) < a.len:
            sys.exit(f"{a.text}: {len(ids)} tokens, fewer than one window of {a.len}")
        starts = np.linspace(0, len(ids) - a.len, a.windows).astype(int)
        windows = [ids[s:s + a.len] for s in starts]
    else:
        rng = np.random.default_rng(1234)
        windows = [rng.integers(3, a.random, a.len).tolist() for _ in range(a.windows)]
    with tempfile.TemporaryDirectory() as tmp:
        refs = [logits(a.ref, w, f"{tmp}/ref{i}.npy") for i, w in enumerate(windows)]
        print(f"| candidate | positions | top-1 agreement | mean KL (nats) | rel. L2 of logits |")
        print(f"|---|---|---|---|---|")
        for c in a.candidates:
            name, model = c.split("=", 1)
            top, kl, num, den, n = 0.0, 0.0, 0.0, 0.0, 0
            for i, w in enumerate(windows):
                r, q = refs[i], logits(model, w, f"{tmp}/c{i}.npy")
                lr, lq = logp(r), logp(q)
                top += float(np.sum(r.argmax(1) == q.argmax(1)))
                kl += float(np.sum((np.exp(lr) * (lr - lq)).sum(1)))
                num += float(np.sum((r - q) ** 2))
                den += float(np.sum(r ** 2))
                n += r.shape[0]
            print(f"| {name} | {n} | {top / n:.4f} | {kl / n:.5f} | {np.sqrt(num / den):.4f} |")


if __name__ == "__main__":
    main()
