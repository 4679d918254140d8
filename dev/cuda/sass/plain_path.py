"""plain_path.py TREE... : per-tile dynamic instruction counts of k_decode's one-position plain
product (DC_PLAIN) and of the routed experts' up / down products in each tree, by run_sass.py.
The dc_product layout is read from the tree's decode.cu (A: 100 bytes; session 11: 128)."""
import sys, re, glob, collections
sys.path.insert(0, __file__.rsplit('/', 1)[0])
import run_sass

def dtype_values(tree):
    return {'NT_DTYPE_Q8_2F': 12, 'NT_DTYPE_Q4TP': 13}  # src/model/safetensors.h

def fields(tree):
    """the dc_product fields in order, with their sizes"""
    src = open(f'{tree}/src/cuda/decode.cu').read()
    body = re.search(r'struct dc_product \{(.*?)\n\};', src, re.S).group(1)
    body = re.sub(r'/\*.*?\*/', '', body, flags=re.S)
    out = []
    for decl in body.split(';'):
        decl = decl.strip()
        if not decl: continue
        ptr = '*' in decl
        # split "const uint8_t *const *Wtab" / "int mode, dtype, act"
        if ptr:
            out.append((re.findall(r'\w+', decl)[-1], 8))
        else:
            t, rest = decl.split(None, 1)
            for n in rest.split(','): out.append((n.strip(), 4))
    return out

def pack(tree, vals):
    b = bytearray(); offs = {}
    for n, sz in fields(tree):
        while len(b) % sz: b.append(0)
        offs[n] = len(b)
        b += int(vals.get(n, 0)).to_bytes(sz, 'little', signed=True)
    return bytes(b), offs

def case(tree, kind):
    dt = dtype_values(tree)
    q8, q4 = dt['NT_DTYPE_Q8_2F'], dt['NT_DTYPE_Q4TP']
    if kind == 'in_proj q8_2f':   # 10304 x 2688, plain
        v = dict(W=0x7f0012345600, x=0x7f1012345600, y=0x7f2012345600, mode=0, dtype=q8, act=0, rows=10304, cols=2688,
                 k=1, nq=1, rb=6, tiles=1718)
        return v, True
    if kind == 'in_proj q4tp':   # 84 chunks a row: rb 12
        v = dict(W=0x7f0012345600, x=0x7f1012345600, y=0x7f2012345600, mode=0, dtype=q4, act=0, rows=10304, cols=2688,
                 k=1, nq=1, rb=12, tiles=859)
        return v, False
    if kind == 'experts up q4tp':  # DC_UP, k 6, mi 1856 rows of 2688: rb 12, tiles 155 a slot; nq 1 (q4tp)
        v = dict(Wtab=0x7f3000000000, idx=0x7f4000000000, x=0x7f1012345600, y=0x7f2012345600, mode=1, dtype=q4,
                 act=1, rows=1856, cols=2688, k=6, nq=1, rb=12, tiles=155)
        return v, False
    if kind == 'experts down q4tp':  # DC_DOWN: 2688 rows of 1856, 6 slots a tile: 58 chunks a row: rb 2
        v = dict(Wtab=0x7f3000000000, idx=0x7f4000000000, qx=0x7f5000000000, wts=0x7f6000000000, x=0x7f1012345600,
                 y=0x7f2012345600, mode=2, dtype=q4, act=0, rows=2688, cols=1856, k=6, nq=6, rb=2, tiles=1344,
                 x_stride=1856)
        return v, False

def kernel(tree, q8):
    return glob.glob(f'{tree}/sass/ann._Z8k_decodeILb{0 if q8 else 1}EEv10dc_product.sass')[0]

def commits(listing):
    prog = run_sass.load(listing)
    return prog, [a for a, (g, op, ops, loc) in prog.items() if op == 'LDGDEPBAR']

def per_tile(tree, kind, tids=(0, 128), grid=396, block=0, show_unknown=False):
    v, q8 = case(tree, kind)
    params, offs = pack(tree, v)
    prog, marks = commits(kernel(tree, q8))
    res = {}
    for tid in tids:
        r = run_sass.run(prog, params, tid, block, grid, 256, {}, marks)
        seq = sorted(x for m in marks for x in r['visits'].get(m, []))
        diffs = [b - a for a, b in zip(seq, seq[1:])]
        ev = [collections.Counter(c for n, c in r['events'] if a < n <= b) for a, b in zip(seq, seq[1:])]
        res[tid] = (r['total'], seq[0] if seq else None, diffs, r['unknown'], r['by_line'], ev)
    return res

if __name__ == '__main__':
    kinds = ['in_proj q8_2f', 'in_proj q4tp', 'experts up q4tp', 'experts down q4tp']
    for kind in kinds:
        print(f'## {kind}')
        for tree in sys.argv[1:]:
            r = per_tile(tree, kind)
            for tid, (tot, first, diffs, unk, _, ev) in r.items():
                w = ' '.join(f'{d}[G{e["G"]} S{e["S"]} B{e["bar"]}]' for d, e in zip(diffs, ev))
                print(f'{tree:4s} tid {tid:3d}: total {tot:6d}, first commit at {first}; per tile: {w}'
                      f'{"  (blind branches: %d)" % len(unk) if unk else ""}')
