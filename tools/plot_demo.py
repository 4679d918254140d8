#!/usr/bin/python3
"""plot_demo.py - the demo model's training figures from its train_log.json (tools/train_demo.py).

Writes val_loss.png (held-out and training loss per step, the kept checkpoint marked) and
routing.png (how often each routed expert is chosen on the held-out text, per MoE layer).
Needs matplotlib (Debian: apt-get install python3-matplotlib; run with /usr/bin/python3).
usage: /usr/bin/python3 tools/plot_demo.py models/nemotron-h-kjv/train_log.json OUTDIR
"""
import json, os, sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

if len(sys.argv) != 3:
    sys.exit(__doc__)
log = json.load(open(sys.argv[1]))
out = sys.argv[2]

steps = [e["step"] for e in log["log"]]
fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
ax.plot(steps, [e["val_loss"] for e in log["log"]], label="held-out (3% of the text)")
ax.plot(steps, [e["train_loss"] for e in log["log"]], label="training batch")
ax.axvline(log["kept_step"], color="gray", linestyle=":", label=f"kept: step {log['kept_step']}")
ax.set_xlabel("step (64 x 256 tokens)")
ax.set_ylabel("cross-entropy (nats/token)")
ax.set_title(f"nemotron-h-kjv: held-out perplexity {log['final_val_perplexity']:.1f}")
ax.legend()
ax.grid(alpha=0.3)
fig.tight_layout()
fig.savefig(os.path.join(out, "val_loss.png"))

routing = log["routing_counts_per_moe_layer"]
fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
width = 0.8 / len(routing)
for i, counts in enumerate(routing):
    total = sum(counts)
    ax.bar([j + i * width for j in range(len(counts))], [100 * c / total for c in counts], width,
           label=f"MoE layer {i + 1}")
ax.axhline(100 / len(routing[0]), color="gray", linestyle=":", label="even load")
ax.set_xlabel("routed expert")
ax.set_ylabel("share of choices on held-out text (%)")
ax.set_xticks([j + 0.4 - width / 2 for j in range(len(routing[0]))], [str(j) for j in range(len(routing[0]))])
ax.set_title("expert routing (top-2 of 8): no dead experts")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(os.path.join(out, "routing.png"))
