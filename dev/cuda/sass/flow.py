"""flow.py TREE/sass/ann.KERNEL.sass [FROM TO] (hex addresses): the annotated listing collapsed to runs of one source line, with the
branches, barriers, waits and loads shown (the control flow to read by hand)."""
import re, sys, glob
f = sys.argv[1]; lo = int(sys.argv[2], 16) if len(sys.argv) > 2 else 0; hi = int(sys.argv[3], 16) if len(sys.argv) > 3 else 1 << 30
tree = f.rsplit('/sass/', 1)[0]  # TREE/sass/ann.KERNEL.sass (sass.sh)
srcs = {}
def text(loc):
    fn, ln = loc.rsplit(':', 1)
    if fn not in srcs:
        p = glob.glob(f'{tree}/src/cuda/{fn}') or glob.glob(f'{tree}/src/{fn}')
        srcs[fn] = open(p[0]).read().splitlines() if p else []
    ln = int(ln)
    return srcs[fn][ln - 1].strip()[:80] if 0 < ln <= len(srcs[fn]) else '?'
run = None
def flush():
    if run: print(f'{run[0]:05x}-{run[1]:05x} {run[2]:3d}  {run[3]:22s} {text(run[3]) if run[3] else ""}')
SHOW = ('BRA', 'BAR', 'DEPBAR', 'LDGDEPBAR', 'LDGSTS', 'EXIT', 'BSSY', 'BSYNC', 'CALL', 'RET', 'ACQBULK', 'PREEXIT', 'WARPSYNC')
for l in open(f):
    m = re.search(r'/\*([0-9a-f]{4,})\*/\s+(.*?);\s*(?://\s*(\S+))?\s*$', l)
    if not m: continue
    a = int(m.group(1), 16)
    if a < lo or a > hi: continue
    ins, loc = m.group(2).strip(), m.group(3) or ''
    op = re.sub(r'^@!?U?P\S+\s+', '', ins).split()[0].split('.')[0]
    if op in SHOW:
        flush(); run = None
        print(f'{a:05x}             {ins}')
        continue
    if run and run[3] == loc: run[1] = a; run[2] += 1
    else:
        flush(); run = [a, a, 1, loc]
flush()
