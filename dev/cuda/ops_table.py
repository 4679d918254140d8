#!/usr/bin/env python3
"""ops_table.py - the gpu_bench_ops logs of one dev/cuda/ab.sh call side by side.

    python3 dev/cuda/ops_table.py DIR [N ...]

DIR holds ab.sh's ops-BUILD-ROUND.log files. Prints one row per operation and pass size (the rows
with n of 16 or more by default, or the sizes named), one column per build with its rounds' µs a
call joined by '/', the first build (N, this tree) first, and each other build's best against N's
best as a ratio (below 1: the other build is faster). ab.sh runs it at its end, so a call's
output ends with the comparison instead of the raw logs."""
import glob
import os
import re
import sys


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    out = sys.argv[1]
    sizes = {int(a) for a in sys.argv[2:]}
    runs = {}  # build -> round -> {(op, n): us}
    for path in glob.glob(os.path.join(out, "ops-*-*.log")):
        m = re.fullmatch(r"ops-(.+)-(\d+)\.log", os.path.basename(path))
        if not m:
            continue
        rows = {}
        with open(path, errors="replace") as f:
            for line in f:
                # "operation name   n   us/call   MB read   GB/s   Tops/s"
                m2 = re.match(r"^(\S.*?)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", line)
                if m2:
                    rows.setdefault((m2.group(1), int(m2.group(2))), float(m2.group(3)))
        runs.setdefault(m.group(1), {})[int(m.group(2))] = rows
    if not runs:
        print(f"ops_table: no ops-BUILD-ROUND.log in {out}", file=sys.stderr)
        return 1
    builds = sorted(runs, key=lambda b: (b != "N", b))
    keys = []
    for b in builds:
        for r in sorted(runs[b]):
            for k in runs[b][r]:
                if k not in keys and (k[1] in sizes if sizes else k[1] >= 16):
                    keys.append(k)
    width = max(len(f"{op} n={n}") for op, n in keys)
    print(f"{'µs a call':{width}}  " + "  ".join(f"{b:>17}" for b in builds))
    for op, n in keys:
        cells, best = [], {}
        for b in builds:
            vals = [runs[b][r][(op, n)] for r in sorted(runs[b]) if (op, n) in runs[b][r]]
            if vals:
                best[b] = min(vals)
            text = "/".join(f"{v:.1f}" for v in vals) or "-"
            if b != builds[0] and b in best and builds[0] in best:
                text += f" ({best[b] / best[builds[0]]:.2f})"
            cells.append(f"{text:>17}")
        print(f"{op + ' n=' + str(n):{width}}  " + "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
