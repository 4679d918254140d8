"""annot.py CUBIN SASSDIR: writes SASSDIR/ann.<kernel>.sass, each instruction of dis.py's listing
with the source file:line the -lineinfo line table gives it (readelf's decoded .debug_line, one
sequence per kernel in the order of the relocations of .rela.debug_line)."""
import re, subprocess, sys, os
cubin, sd = sys.argv[1], sys.argv[2]
rel = subprocess.run(['readelf', '-rW', cubin], capture_output=True, text=True).stdout
syms = []
sect = None
for l in rel.splitlines():
    if l.startswith('Relocation section'): sect = l.split("'")[1]
    elif sect == '.rela.debug_line':
        m = re.search(r'(_Z\S+)', l)
        if m: syms.append(m.group(1))
dl = subprocess.run(['readelf', '--debug-dump=decodedline', cubin], capture_output=True, text=True).stdout
seqs, cur, last = [], [], -1
for l in dl.splitlines():
    m = re.match(r'(\S+)\s+(\d+)\s+(0x[0-9a-f]+|0)\s', l)
    if not m: continue
    a = int(m.group(3), 16)
    if cur and a < last and a == 0:
        seqs.append(cur); cur = []
    cur.append((a, m.group(1), int(m.group(2)))); last = a
if cur: seqs.append(cur)
for sym, seq in zip(syms, seqs):
    path = os.path.join(sd, f'sass.{sym}.sass')
    if not os.path.exists(path): continue
    seq.sort(key=lambda x: x[0])
    out, k, loc = [], 0, ''
    for l in open(path):
        m = re.search(r'/\*([0-9a-f]{4,})\*/', l)
        if m:
            a = int(m.group(1), 16)
            while k < len(seq) and seq[k][0] <= a:
                loc = f'{seq[k][1]}:{seq[k][2]}'; k += 1
            l = f'{l.rstrip():90s} // {loc}\n'
        out.append(l)
    open(os.path.join(sd, f'ann.{sym}.sass'), 'w').write(''.join(out))
    print(sym, len(seq), 'line rows')
