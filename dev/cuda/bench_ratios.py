#!/usr/bin/env python3
"""bench_ratios.py - the nemotron bench figures of one dev/cuda/ab.sh call as paired ratios.

    python3 dev/cuda/bench_ratios.py AB_LOG

AB_LOG is ab.sh's ab.log. For each figure (tg128, pp420, pp2048) and each other build X, prints the
ratio N / X of every round (the two ran minutes apart on the same card, one after the other), their
median, and each build's own spread; then the verify passes' times (one run a build). Why: the card's speed drifts within a call (call 3 of session
21: main alone 358.5 - 373.0 tok/s over three rounds), so two builds' lowest - highest ranges
overlap where the per-round ratios agree; the ratios are the measurement, the ranges the noise.
ab.sh runs it at its end."""
import re
import statistics
import sys

FIGURES = ("tg128", "pp420", "pp2048")


def rows_under(path, head, row):
    """(head's match, row's match) for each line matching row (re.search) in a section of ab.log
    that opens with a line matching head; any other '-- ' line closes the section."""
    cur = None
    with open(path, errors="replace") as f:
        for line in f:
            m = head.match(line)
            if m:
                cur = m
                continue
            if line.startswith("-- "):
                cur = None
                continue
            m = row.search(line)
            if m and cur:
                yield cur, m


def read(path):
    """round -> build -> figure -> tok/s, from ab.sh's '-- round R V: bench' headers and the
    bench tables' rows after them."""
    runs = {}
    for h, m in rows_under(path, re.compile(r"^-- round (\d+) (\S+): bench"),
                           re.compile(r"\|\s*(tg128|pp420|pp2048)\s*\|\s*([0-9.]+)\s*±")):
        runs.setdefault(int(h.group(1)), {}).setdefault(h.group(2), {})[m.group(1)] = float(m.group(2))
    return runs


def read_verify(path):
    """build -> [(positions, ms)] from ab.sh's '-- V: verify passes' blocks."""
    out = {}
    for h, m in rows_under(path, re.compile(r"^-- (\S+): verify passes"),
                           re.compile(r"^verify pass of (\S+) positions: ([0-9.]+) ms")):
        out.setdefault(h.group(1), []).append((m.group(1), float(m.group(2))))
    return out


def read_argv(prog, usage):
    """(path, read(path)) of the one argument, an ab.log; exits 2 after the usage line when there is
    not one argument, 1 when the file cannot be read (the readers' shared command line)."""
    if len(sys.argv) != 2:
        print(usage, file=sys.stderr)
        sys.exit(2)
    try:
        return sys.argv[1], read(sys.argv[1])
    except OSError as e:
        print(f"{prog}: {sys.argv[1]}: {e.strerror}", file=sys.stderr)
        sys.exit(1)


def main():
    path, runs = read_argv("bench_ratios", __doc__.strip().splitlines()[2].strip())
    if not runs:
        print("bench_ratios: no bench rounds in " + path, file=sys.stderr)
        return 1
    builds = sorted({b for r in runs.values() for b in r}, key=lambda b: (b != "N", b))
    for fig in FIGURES:
        spread = []
        for b in builds:
            xs = [runs[r][b][fig] for r in sorted(runs) if fig in runs[r].get(b, {})]
            if xs:
                spread.append(f"{b} {min(xs):.1f} - {max(xs):.1f}")
        if spread:
            print(f"{fig}: " + ", ".join(spread))
        for b in builds:
            if b == "N":
                continue
            ratios = [runs[r]["N"][fig] / runs[r][b][fig] for r in sorted(runs)
                      if fig in runs[r].get("N", {}) and fig in runs[r].get(b, {})]
            if ratios:
                each = " ".join(f"{x:.3f}" for x in ratios)
                print(f"  N / {b} by round: {each}; median {statistics.median(ratios):.3f}")
    verify = read_verify(path)
    for pos, ms in verify.get("N", []):
        others = [f"{b} {dict(verify[b])[pos]:.2f}" for b in builds if b != "N" and pos in dict(verify.get(b, []))]
        print(f"verify pass {pos} (ms): N {ms:.2f}" + "".join(", " + o for o in others))
    return 0


if __name__ == "__main__":
    sys.exit(main())
