"""pathdiff.py KIND TID TREE1 TREE2 [ITER]: instructions of one tile iteration (the ITER-th
commit-to-commit span, default 2) on the path, by source line text, TREE1 vs TREE2."""
import sys, glob, collections, re
sys.path.insert(0, __file__.rsplit('/', 1)[0])
import plain_path as pp, run_sass
kind, tid, t1, t2 = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
it = int(sys.argv[5]) if len(sys.argv) > 5 else 2
srcs = {}
def text(tree, loc):
    if not loc: return '?'
    fn, ln = loc.rsplit(':', 1)
    key = (tree, fn)
    if key not in srcs:
        p = glob.glob(f'{tree}/src/cuda/{fn}')
        srcs[key] = open(p[0]).read().splitlines() if p else []
    L = srcs[key]; ln = int(ln)
    return f'{fn}: ' + (L[ln - 1].strip()[:90] if 0 < ln <= len(L) else '?')
def span(tree):
    v, q8 = pp.case(tree, kind); params, _ = pp.pack(tree, v)
    prog, marks = pp.commits(pp.kernel(tree, q8))
    r = run_sass.run(prog, params, tid, 0, 396, 256, {}, marks)
    seq = sorted(x for m in marks for x in r['visits'].get(m, []))
    lo, hi = seq[it], seq[it + 1]
    # rerun with a trace of pcs to get the span's lines
    th_lines = collections.Counter(); ops = collections.Counter()
    r2 = run_sass.run(prog, params, tid, 0, 396, 256, {}, marks, limit=hi)
    r1 = run_sass.run(prog, params, tid, 0, 396, 256, {}, marks, limit=lo)
    for k in r2['by_line']: th_lines[text(tree, k)] += r2['by_line'][k] - r1['by_line'].get(k, 0)
    for k in r2['by_op']: ops[k] += r2['by_op'][k] - r1['by_op'].get(k, 0)
    return hi - lo, th_lines, ops
n1, l1, o1 = span(t1); n2, l2, o2 = span(t2)
print(f'# {kind}, thread {tid}, tile span {it}: {t1} {n1}, {t2} {n2}')
keys = list(dict.fromkeys(list(l1) + list(l2)))
for k in keys:
    if l1[k] != l2[k]: print(f'{l1[k]:5d} {l2[k]:5d}  {k}')
print('ops:', ' '.join(f'{k}:{o1[k]}->{o2[k]}' for k in sorted(set(o1) | set(o2)) if o1[k] != o2[k]))
