#!/usr/bin/env python3
"""account.py - what each operation costs a decode step and a prompt's pass in place, from the
knock-out builds of one dev/cuda/ab.sh call (dev/cuda/account.sh runs them).

    python3 dev/cuda/account.py AB_LOG

AB_LOG is ab.sh's ab.log with builds N and N:NEMOTRON_CUDA_KNOCKOUT=OPS (src/cuda/pass.cu: the
named operations left out of the replayed passes). An operation's cost in place is the step with it
less the step without it, round by round (the two ran back to back on the same card: the card's
drift cancels; session 21 saw one build spread 4 % over three rounds). For tg128 the step is
1 / (tok/s), in ms; for the prompts, the share of the pass, 1 - (N's tok/s) / (the knock-out's). The
median of the rounds is printed, then the lowest - highest. Left out one at a time, an operation's
neighbours fill part of its place (overlaps, launch gaps), so the costs need not sum to the step:
the table says by how much they fall short."""
import statistics
import sys

from bench_ratios import read_argv

KNOCK = "NEMOTRON_CUDA_KNOCKOUT="
# Nemotron-3-Nano-30B-A3B's products by shape (the synthetic model ab.sh benches), for the labels
NANO = {
    "matmul:10304x2688": "Mamba in_proj",
    "matmul:2688x4096": "Mamba out_proj, attention o",
    "matmul:3712x2688+matmul:2688x3712": "shared expert up + down",
    "matmul:4096x2688+matmul:256x2688": "attention q, k, v",
    "matmul:128x2688": "router (f32)",
    "matmul:131072x2688": "lm_head",
    "matmul": "every product but the routed experts",
    "moe_experts": "routed experts",
    "mamba_conv+mamba_scan+mamba_gated_norm": "Mamba conv, scan, gated norm",
    "add_rmsnorm+rmsnorm": "norms",
    "attention": "attention (tiles, fold, KV append)",
}

# the kinds that together are everything knockable (the products' shapes are parts of "matmul")
KINDS = ("matmul", "moe_experts", "mamba_conv+mamba_scan+mamba_gated_norm", "add_rmsnorm+rmsnorm", "attention")


def label(ops):
    if ops in NANO:
        return NANO[ops]
    return "everything knockable" if ops.count("+") >= 6 else ops


def span(xs, fmt):
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))} - {fmt.format(max(xs))})"


def main():
    path, runs = read_argv("account", __doc__.strip().splitlines()[3].strip())
    rounds = sorted(r for r in runs if "N" in runs[r])
    if not rounds:
        print(f"account: no rounds of build N in {path}", file=sys.stderr)
        return 1
    knocks = sorted({b for r in rounds for b in runs[r] if b.startswith("N:" + KNOCK)})
    if not knocks:
        print(f"account: no N:{KNOCK}... builds in {path}", file=sys.stderr)
        return 1
    steps = [1000.0 / runs[r]["N"]["tg128"] for r in rounds if "tg128" in runs[r]["N"]]
    print(f"decode step (N): {span(steps, '{:.3f}')} ms over {len(steps)} rounds\n")
    print("| left out | cost in place, ms a step | share of the step | share of pp420 | share of pp2048 |")
    print("|---|---|---|---|---|")
    total, kinds = 0.0, 0
    everything = None
    for k in knocks:
        ops = k[len("N:" + KNOCK):]
        cost, share = [], {"pp420": [], "pp2048": []}
        for r in rounds:
            n, x = runs[r]["N"], runs[r].get(k, {})
            if "tg128" in n and "tg128" in x:
                cost.append(1000.0 / n["tg128"] - 1000.0 / x["tg128"])
            for fig in share:
                if fig in n and fig in x:
                    share[fig].append(1.0 - n[fig] / x[fig])
        if not cost:
            continue
        step = statistics.median(steps)
        cells = [span(cost, "{:.3f}"), f"{100 * statistics.median(cost) / step:.0f} %"]
        cells += [span([100 * s for s in share[f]], "{:.0f}") + " %" if share[f] else "" for f in share]
        print(f"| {label(ops)} | " + " | ".join(cells) + " |")
        if label(ops) == "everything knockable":
            everything = statistics.median(cost)
        elif ops in KINDS:
            total += statistics.median(cost)
            kinds += 1
    step = statistics.median(steps)
    rest = None
    if everything is not None:
        rest = step - everything
        print(f"\nleft when everything knockable is out (embed, routes, argmax, launches, host): {rest:.3f} ms")
    if kinds == len(KINDS):
        more = f" and with what is left {total + rest:.3f}" if rest is not None else ""
        print(f"the kinds' costs ({', '.join(KINDS)}) sum to {total:.3f} ms{more}, of the step's {step:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
