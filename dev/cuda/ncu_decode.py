#!/usr/bin/env python3
"""ncu_decode.py - an account of a decode step from ncu's per-kernel durations (docs/PERF.md).

    python3 dev/cuda/ncu_decode.py NCU.csv

NCU.csv: `ncu --metrics gpu__time_duration.sum --csv` over ~430 launches of decode steps of the
synthetic Nemotron-3-Nano (docs/PERF.md, session 18, gives the command). Each kernel is named by
the operation it runs from its place in the layer (the kernels before and after it: the same
k_decode runs every plain product), the medians of each class are taken, and each is multiplied
by its calls a token for Nano's 52 layers (23 Mamba, 23 MoE, 6 attention).
"""
import collections
import csv
import re
import sys

CALLS = {  # calls a token, Nemotron-3-Nano-30B-A3B
    "routed experts up": 23, "routed experts down (+ combine)": 23, "in_proj 10304 x 2688": 23,
    "router f32 128 x 2688": 23, "out_proj 2688 x 4096": 23, "shared expert down 2688 x 3712": 23,
    "shared expert up 3712 x 2688": 23, "add_rmsnorm": 53, "Mamba scan": 23, "Mamba conv": 23,
    "gated norm": 23, "route (top 6 of 128)": 23, "experts: quantize the down rows": 23,
    "lm_head 131072 x 2688": 1, "attention q 4096 x 2688": 6, "attention k, v (256 x 2688)": 12,
    "o_proj 2688 x 4096": 6, "attention tiles": 6, "attention fold": 6, "k_kv_append": 6,
    "k_argmax": 1, "k_embed": 1,
}


# (which neighbour, its kernel name's start, the product): checked in this order
PLAIN_BY_NEIGHBOUR = (
    ("before", "k_gated_norm", "out_proj 2688 x 4096"),
    ("before", "k_attention_fold", "o_proj 2688 x 4096"),
    ("before", "k_float_row", "shared expert up 3712 x 2688"),
    ("after", "k_moe_route", "shared expert down 2688 x 3712"),
    ("after", "k_argmax", "lm_head 131072 x 2688"),
    ("before", "k_rmsnorm", "in_proj 10304 x 2688"),
)


def load(path):
    lines = open(path).read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
    rows = list(csv.reader(lines[start:]))
    hdr, rows = rows[0], rows[1:]
    ki, vi, ui, gi = (hdr.index(k) for k in ("Kernel Name", "Metric Value", "Metric Unit", "Grid Size"))
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    return [(re.sub(r"\(.*", "", r[ki]).replace("void ", "").strip(), r[gi],
             float(r[vi].replace(",", "")) * scale[r[ui]]) for r in rows]


def classify(seq, i):
    name, grid, _ = seq[i]
    prev = seq[i - 1][0] if i else ""
    nxt, nxt_grid = (seq[i + 1][0], seq[i + 1][1]) if i + 1 < len(seq) else ("", "")
    if name.startswith("k_decode<1>"):
        return "routed experts up" if nxt.startswith("k_dc_quantize") else "routed experts down (+ combine)"
    if name.startswith("k_decode<0>"):  # the plain products: told apart by their neighbours
        if grid.startswith("(43"):
            return "attention k, v (256 x 2688)"
        if nxt.startswith("k_decode<0>") and nxt_grid.startswith("(43"):
            return "attention q 4096 x 2688"
        for side, prefix, cls in PLAIN_BY_NEIGHBOUR:
            if (prev if side == "before" else nxt).startswith(prefix):
                return cls
        return "unclassified k_decode"
    for prefix, cls in (("k_float_row", "router f32 128 x 2688"), ("k_rmsnorm", "add_rmsnorm"),
                        ("k_mamba_scan", "Mamba scan"), ("k_mamba_conv", "Mamba conv"),
                        ("k_gated_norm", "gated norm"), ("k_moe_route", "route (top 6 of 128)"),
                        ("k_dc_quantize", "experts: quantize the down rows"),
                        ("k_attention_tiles", "attention tiles"), ("k_attention_fold", "attention fold")):
        if name.startswith(prefix):
            return cls
    return name


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    seq = load(sys.argv[1])
    samples = collections.defaultdict(list)
    for i in range(len(seq)):
        samples[classify(seq, i)].append(seq[i][2])
    lines, total = [], 0.0
    for cls, v in samples.items():
        med = sorted(v)[len(v) // 2]
        n = CALLS.get(cls, 0)
        total += med * n
        lines.append((med * n, cls, len(v), med, n))
    for t, cls, k, med, n in sorted(lines, reverse=True):
        print(f"{cls:36s} samples {k:3d}  median {med:7.2f} us x {n:2d} = {t:7.1f} us a token")
    print(f"sum {total:.1f} us a token ({len(seq)} launches read)")


if __name__ == "__main__":
    main()
