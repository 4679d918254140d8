#!/usr/bin/env python3
"""compare.py - compares two logits files (.npy [n, vocab], as `nemotron logits` writes them).

    tests/gpu/compare.py NAME A.npy B.npy TOL [C.npy]

Prints one line: the worst per-position relative L2 error ||a - b|| / ||a||, the largest absolute
difference, how many positions agree on the argmax, and whether the two are bit-identical. Exits
1 when the worst relative error exceeds TOL, when any value is not finite, or when a position's
argmax differs while its top two logits (in A) are further apart than the error could explain.
With C (the same logits computed another way, e.g. with unquantized weights) the error is held
against ||a - c|| instead of ||a|| (whole arrays): TOL is then the largest share of that
difference that A and B may differ by, and argmax flips are only reported. numpy only.
"""
import sys

import numpy as np


def main():
    name, fa, fb, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    a = np.load(fa).astype(np.float64)
    b = np.load(fb).astype(np.float64)
    scale = np.load(sys.argv[5]).astype(np.float64) if len(sys.argv) > 5 else None
    if a.shape != b.shape:
        print(f"{name}: shapes differ: {a.shape} vs {b.shape}")
        return 1
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        print(f"{name}: non-finite logits")
        return 1
    diff = a - b
    rel = np.linalg.norm(diff, axis=1) / np.maximum(np.linalg.norm(a, axis=1), 1e-30)
    top_a, top_b = a.argmax(1), b.argmax(1)
    agree = int((top_a == top_b).sum())
    # a position whose top two logits are closer than the absolute error may flip its argmax
    srt = np.sort(a, axis=1)
    gap = srt[:, -1] - srt[:, -2]
    bad_flip = int(((top_a != top_b) & (gap > 2 * np.abs(diff).max(1))).sum())
    exact = bool((a == b).all())
    if scale is not None:
        share = np.linalg.norm(diff) / max(np.linalg.norm(a - scale), 1e-30)
        ok = share <= tol
        print(f"{name}: difference {share:.3e} of the reference difference (tol {tol:.2g}), worst rel "
              f"{rel.max():.3e}, top-1 agree {agree}/{a.shape[0]}, "
              f"{'bit-identical' if exact else 'not bit-identical'}{'' if ok else '  FAILED'}")
        return 0 if ok else 1
    ok = rel.max() <= tol and bad_flip == 0
    print(f"{name}: worst rel {rel.max():.3e} (tol {tol:.2g}), max abs {np.abs(diff).max():.3e}, "
          f"top-1 agree {agree}/{a.shape[0]}, {'bit-identical' if exact else 'not bit-identical'}"
          f"{'' if ok else '  FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
