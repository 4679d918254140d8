"""opdiff.py A.sass B.sass [-q]: difflib over the opcode sequences (registers and constants ignored);
prints the differing blocks with their source lines (annotated listings)."""
import re, sys, difflib
def load(f):
    out = []
    for l in open(f):
        m = re.search(r'/\*([0-9a-f]{4,})\*/\s+(.*?);\s*(?://\s*(\S+))?\s*$', l)
        if not m: continue
        ins = m.group(2).strip()
        op = re.sub(r'^(@!?U?P\S+)\s+', r'\1 ', ins).split(' ')
        key = ' '.join(op[:2]) if op[0].startswith('@') else op[0]
        key = re.sub(r'@!?U?P[0-9T]', '@P', key)
        out.append((key, int(m.group(1), 16), ins, m.group(3) or ''))
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
sm = difflib.SequenceMatcher(None, [x[0] for x in a], [x[0] for x in b], autojunk=False)
same = sum(bl.size for bl in sm.get_matching_blocks())
print(f'# {len(a)} vs {len(b)} instructions, {same} in matching runs, ratio {sm.ratio():.3f}')
if '-q' in sys.argv: sys.exit()
for tag, i1, i2, j1, j2 in sm.get_opcodes():
    if tag == 'equal': continue
    print(f'--- {tag} A[{a[i1][1] if i1 < len(a) else -1:05x}:+{i2-i1}] B[{b[j1][1] if j1 < len(b) else -1:05x}:+{j2-j1}]')
    for x in a[i1:i2][:12]: print(f'  - {x[1]:05x} {x[2]:50s} {x[3]}')
    for x in b[j1:j2][:12]: print(f'  + {x[1]:05x} {x[2]:50s} {x[3]}')
