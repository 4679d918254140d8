"""footprint.py TREE...: the instruction footprint of one steady-state tile iteration of k_decode's
plain / experts paths (run_sass.py): instructions issued, distinct instructions, distinct 128-byte
lines, and the address span they lie in (a larger spread of the hot path over the code means more
instruction-cache lines per tile)."""
import sys
sys.path.insert(0, __file__.rsplit('/', 1)[0])
import plain_path as pp, run_sass
def tile_pcs(tree, kind, tid, it=2):
    v, q8 = pp.case(tree, kind); params, _ = pp.pack(tree, v)
    prog, marks = pp.commits(pp.kernel(tree, q8))
    r = run_sass.run(prog, params, tid, 0, 396, 256, {}, marks)
    seq = sorted(x for m in marks for x in r['visits'].get(m, []))
    lo, hi = seq[it], seq[it + 1]
    r1 = run_sass.run(prog, params, tid, 0, 396, 256, {}, marks, limit=lo)
    r2 = run_sass.run(prog, params, tid, 0, 396, 256, {}, marks, limit=hi)
    pcs = {p for p in r2['by_pc'] if r2['by_pc'][p] > r1['by_pc'].get(p, 0)}
    return hi - lo, pcs, len(prog) * 16
if __name__ == '__main__':
    for kind in ['in_proj q8_2f', 'in_proj q4tp', 'experts up q4tp', 'experts down q4tp']:
        print(f'## {kind}')
        for tree in sys.argv[1:]:
            for tid in (0, 128):
                n, pcs, size = tile_pcs(tree, kind, tid)
                lines = {p // 128 for p in pcs}
                print(f'{tree:4s} tid {tid:3d}: {n:5d} issued, {len(pcs):4d} distinct, {len(lines):3d} lines of 128 B, '
                      f'span {min(pcs):#07x}-{max(pcs):#07x} ({(max(pcs) - min(pcs)) / 1024:.1f} KB) of {size / 1024:.1f} KB')
