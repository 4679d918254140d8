"""float_row.py TREE...: k_float_row at one position (the router, 128 x 2688 f32): instructions
issued by threads 0 (lane 0: the chain, the tree, the store), 3 (a chain lane), 12 (a lane of
warp 0 past the 8 chain lanes) and 40 (warp 1), by run_sass.py."""
import sys, glob, struct
sys.path.insert(0, __file__.rsplit('/', 1)[0])
import run_sass
W, X, Y = 0x7f0012345600, 0x7f1012345600, 0x7f2012345600
def params(tree, listing):
    multi = 'iPfi' in listing  # session 11's signature: (..., int n, x, int x_stride, y, int y_stride)
    if multi:
        return struct.pack('<QiiQiiQiiQi', W, 0, 2688, 0, 0, 1, X, 0, 0, Y, 0)
    return struct.pack('<QiiQiiQQ', W, 0, 2688, 0, 0, 0, X, Y)
def run(tree, tid):
    f = [g for g in glob.glob(f'{tree}/sass/ann._Z11k_float_row[P]*.sass')][0]
    r = run_sass.run(f, params(tree, f), tid, 5, 128, 128, {})
    return r
if __name__ == '__main__':
    for tree in sys.argv[1:]:
        out = []
        for tid in (0, 3, 12, 40):
            r = run(tree, tid)
            w = r['waits']
            out.append(f'tid {tid}: {r["total"]} instr, waits G{w["G"]} S{w["S"]}' + (f' (blind {len(r["unknown"])})' if r['unknown'] else ''))
        print(tree, ', '.join(out))
