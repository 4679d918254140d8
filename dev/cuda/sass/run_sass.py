"""run_sass.py: walks one thread of a kernel through its SASS (an annotated listing of dis.py /
annot.py) with the kernel's parameters, thread and block known, and counts the instructions it
issues: the dynamic instruction count of a path (here: k_decode's one-position plain product)
without a GPU.

Integer arithmetic, predicates, constant-bank loads of the parameters, special registers and the
integer-division idiom (I2F.RP, MUFU.RCP, F2I) are executed; loaded data, float results and
shuffles are unknown (None). Control flow that depends on an unknown value is reported, and
decided by an override table (address -> taken) or by default not taken. BRA.DIV (a divergent
warp) is never taken: the thread's warp is taken as converged.

Usage as a module: run(listing, params bytes, tid, ctaid, nctaid, ntid, overrides, marks)
-> dict with 'total', 'by_line' (Counter), 'visits' (address -> [instruction count at each visit]),
'unknown' (branches decided blindly)."""
import collections, re, struct

M32 = 0xffffffff
FAKE_PTR = 0x7f3012345600  # what a 64-bit load returns (None: unknown)


def f2b(f):
    return struct.unpack('<I', struct.pack('<f', f))[0]


def b2f(b):
    return struct.unpack('<f', struct.pack('<I', b & M32))[0]


def sx(v):
    return v - (1 << 32) if v & 0x80000000 else v


LINE = re.compile(r'/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*(?://\s*(\S+))?\s*$')


def load(path):
    prog = {}
    for l in open(path):
        m = LINE.search(l)
        if not m:
            continue
        a = int(m.group(1), 16)
        ins = m.group(2).strip()
        guard = None
        g = re.match(r'(@!?U?P[0-9T])\s+(.*)', ins)
        if g:
            guard, ins = g.group(1)[1:], g.group(2)
        parts = ins.split(None, 1)
        op = parts[0]
        ops = [o.strip() for o in parts[1].split(',')] if len(parts) > 1 else []
        # memory operands and c[][] contain commas? c[0x0][0x10] does not; [R1.64+0x10] does not
        prog[a] = (guard, op, ops, m.group(3) or '')
    return prog


def cboff(th, s):
    m = re.fullmatch(r'c\[0x0\]\[(.*)\]', s)
    if not m:
        return None
    tot = 0
    for t in m.group(1).split('+'):
        t = t.strip()
        if re.fullmatch(r'-?0x[0-9a-f]+', t):
            tot += int(t, 16)
        else:
            v = th.reg(t.replace('.reuse', ''))
            if v is None:
                return None
            tot += v
    return tot


class Thread:
    def __init__(self, params, sregs, overrides):
        self.r = {}
        self.ur = {}
        self.p = {}
        self.up = {}
        self.params = params
        self.sregs = sregs
        self.over = overrides
        self.unknown = []

    # ---- operands --------------------------------------------------------------------------
    def reg(self, name):
        if name in ('RZ', 'URZ', 'SRZ'):
            return 0
        # a register never written reads 0 (the compiler may set and clear single bits of one)
        if name.startswith('UR'):
            return self.ur.get(int(name[2:]), 0)
        return self.r.get(int(name[1:]), 0)

    def setreg(self, name, v):
        if name in ('RZ', 'URZ'):
            return
        v = None if v is None else v & M32
        if name.startswith('UR'):
            self.ur[int(name[2:])] = v
        else:
            self.r[int(name[1:])] = v

    def regpair(self, name):
        if name in ('RZ', 'URZ'):
            return 0
        u = name.startswith('UR')
        n = int(name[2:] if u else name[1:])
        lo = (self.ur if u else self.r).get(n)
        hi = (self.ur if u else self.r).get(n + 1)
        return None if lo is None or hi is None else lo | hi << 32

    def setpair(self, name, v):
        u = name.startswith('UR')
        if name in ('RZ', 'URZ'):
            return
        n = int(name[2:] if u else name[1:])
        t = self.ur if u else self.r
        if v is None:
            t[n] = t[n + 1] = None
        else:
            t[n] = v & M32
            t[n + 1] = v >> 32 & M32

    def cb(self, off, width=4):
        b = self.params.get(off)
        if off < 0x210:  # launch constants: blockDim at 0x0, gridDim at 0xc
            v = {0x0: self.sregs['ntid'], 0x4: 1, 0x8: 1, 0xc: self.sregs['nctaid'], 0x10: 1, 0x14: 1,
                 0x28: 0xfffc00}.get(off)
            if width == 8:
                return None
            return v
        raw = self.params['bytes']
        o = off - 0x210
        if o + width > len(raw):
            return None
        return int.from_bytes(raw[o:o + width], 'little')

    def val(self, s, pair=False):
        """value of an operand: register (with - ~ |.| and .reuse), immediate, c[0x0][imm]."""
        s = s.replace('.reuse', '')
        neg = inv = ab = False
        if s.startswith('-'):
            neg, s = True, s[1:]
        if s.startswith('~'):
            inv, s = True, s[1:]
        if s.startswith('|') and s.endswith('|'):
            ab, s = True, s[1:-1]
        if s.startswith('c['):
            o = cboff(self, s)
            v = None if o is None else self.cb(o, 8 if pair else 4)
        elif re.fullmatch(r'U?R(\d+|Z)', s) or s in ('SRZ',):
            v = self.regpair(s) if pair else self.reg(s)
        elif re.fullmatch(r'-?0x[0-9a-f]+', s):
            v = int(s, 16) & (2 ** 64 - 1 if pair else M32)
        elif re.fullmatch(r'-?\d+', s):
            v = int(s) & M32
        else:
            return None
        if v is None:
            return None
        mask = 2 ** 64 - 1 if pair else M32
        if ab:
            v = abs(sx(v)) & mask
        if inv:
            v = ~v & mask
        if neg:
            v = -v & mask
        return v

    def pred(self, s):
        neg = s.startswith('!')
        s = s.lstrip('!')
        if s in ('PT', 'UPT'):
            v = True
        elif s.startswith('UP'):
            v = self.up.get(int(s[2:]))
        else:
            v = self.p.get(int(s[1:]))
        return None if v is None else (v != neg)

    def setpred(self, s, v):
        if s in ('PT', 'UPT'):
            return
        if s.startswith('UP'):
            self.up[int(s[2:])] = v
        else:
            self.p[int(s[1:])] = v


def cmp(kind, a, b, signed):
    if a is None or b is None:
        return None
    if signed:
        a, b = sx(a), sx(b)
    return {'EQ': a == b, 'NE': a != b, 'LT': a < b, 'LE': a <= b, 'GT': a > b, 'GE': a >= b}[kind]


def combine(bop, x, y):
    if bop == 'AND':
        if x is False or y is False:
            return False
        return None if x is None or y is None else True
    if bop == 'OR':
        if x is True or y is True:
            return True
        return None if x is None or y is None else False
    if x is None or y is None:
        return None
    return x != y  # XOR


def lop3(a, b, c, lut):
    if None in (a, b, c):
        # a few are decidable (and with 0); keep simple
        return None
    r = 0
    for i in range(32):
        idx = (a >> i & 1) << 2 | (b >> i & 1) << 1 | (c >> i & 1)
        r |= (lut >> idx & 1) << i
    return r


def run(listing, params, tid, ctaid, nctaid, ntid, overrides=None, marks=(), limit=2_000_000, entry=0, trace=None):
    prog = load(listing) if isinstance(listing, str) else listing
    th = Thread({'bytes': params}, {'tid': tid, 'ctaid': ctaid, 'nctaid': nctaid, 'ntid': ntid}, overrides or {})
    pc, n = entry, 0
    by_line = collections.Counter()
    by_op = collections.Counter()
    by_pc = collections.Counter()
    visits = collections.defaultdict(list)
    stack = []
    marks = set(marks)
    pending = {}  # register -> 'G' (global load) / 'S' (shared load) not yet waited for
    waits = collections.Counter()
    events = []
    wait_lines = collections.Counter()
    while n < limit:
        if pc not in prog:
            raise RuntimeError(f'pc {pc:#x} not in listing')
        guard, op, ops, loc = prog[pc]
        n += 1
        by_line[loc] += 1
        base = op.split('.')[0]
        by_op[base] += 1
        by_pc[pc] += 1
        if pc in marks:
            visits[pc].append(n - 1)
        if trace and pc in trace:
            print(f'{pc:#x}', {r: th.reg(r) for r in trace[pc]})
        g = True if guard is None else th.pred(guard)
        nxt = pc + 16
        mods = op.split('.')[1:]
        if pending:
            srcs = sources(base, ops)
            hit = {pending[r] for r in srcs if r in pending}
            for cls in hit:
                waits[cls] += 1
                events.append((n, cls))
                wait_lines[(cls, loc)] += 1
                for r in [r for r, c in pending.items() if c == cls]:
                    del pending[r]
        if base in ('DEPBAR',):
            waits['cp.async'] += 1
            events.append((n, 'cp.async'))
        if base == 'BAR':
            events.append((n, 'bar'))
        if g is not False and base in ('LDG', 'LD', 'LDS', 'LDSM') and ops:
            w = 4 if '128' in mods else 2 if '64' in mods else 1
            m0 = re.fullmatch(r'R(\d+)', ops[0])
            if m0:
                for k in range(w):
                    pending[f'R{int(m0.group(1)) + k}'] = 'G' if base in ('LDG', 'LD') else 'S'
        if base == 'EXIT' and g:
            break
        if base in ('BRA',):
            tgt = int(re.search(r'0x[0-9a-f]+', ops[-1]).group(0), 16)
            if 'DIV' in mods:
                take = False
            elif 'U' in mods and 'ANY' in mods:
                take = g
            else:
                take = g
            if len(ops) == 2 and ops[0].lstrip('!').startswith('P'):  # BRA !P5, tgt : guard and operand
                q = th.pred(ops[0])
                take = None if take is None or q is None else (take and q)
            if take is None:
                take = overrides.get(pc, False) if overrides else False
                th.unknown.append((pc, loc, take))
            if take:
                nxt = tgt
        elif base == 'CALL':
            tgt = int(re.search(r'0x[0-9a-f]+', ops[-1]).group(0), 16)
            if g is None:
                g = overrides.get(pc, False) if overrides else False
                th.unknown.append((pc, loc, g))
            if g:
                stack.append(pc + 16)
                nxt = tgt
        elif base == 'RET':
            if g:
                nxt = stack.pop()
        elif g is False:
            pass
        else:
            execute(th, base, mods, ops, g)
        pc = nxt
    return {'events': events, 'waits': waits, 'wait_lines': wait_lines, 'total': n, 'by_pc': by_pc, 'by_line': by_line, 'by_op': by_op, 'visits': dict(visits), 'unknown': th.unknown}


def sources(base, ops):
    """the registers an instruction reads (its first operand is a destination unless it stores)"""
    stores = base in ('STS', 'STG', 'ST', 'LDGSTS', 'RED', 'ATOMG', 'ATOMS', 'BRA', 'UBLKPF')
    out = set()
    for i, o in enumerate(ops):
        if i == 0 and not stores:
            continue
        for m in re.finditer(r'(?<![A-Z])R(\d+)(\.64)?', o):
            out.add(f'R{m.group(1)}')
            if m.group(2):
                out.add(f'R{int(m.group(1)) + 1}')
    return out


def addend(th, o):
    """an IADD3 operand as the adder sees it: -x is ~x + 1 (so x - 0 carries, as the hardware does)"""
    if o.startswith('-'):
        v = th.val(o[1:])
        return None if v is None else (~v & M32) + 1
    return th.val(o)


def wr(th, d, v, g):
    if re.fullmatch(r'!?U?P[0-9T]', d):
        th.setpred(d.lstrip('!'), None)
        return
    th.setreg(d, None if g is None else v)


def execute(th, base, mods, ops, g):
    V = th.val
    b = base[1:] if base.startswith('U') and base not in ('UBLKPF',) and len(base) > 1 and base[1:] in (
        'IADD3', 'LEA', 'SHF', 'LOP3', 'IMAD', 'MOV', 'SEL', 'ISETP', 'LDC', 'PLOP3', 'FLO', 'POPC', 'PRMT') else base
    if b in ('MOV',):
        wr(th, ops[0], V(ops[1]), g)
    elif b == 'IMAD':
        d = ops[0]
        if 'WIDE' in mods:
            a, bb = V(ops[1]), V(ops[2])
            c = V(ops[3], pair=True)
            if None in (a, bb, c):
                th.setpair(d, None)
            else:
                if 'U32' not in mods:
                    a, bb = sx(a), sx(bb)
                th.setpair(d, None if g is None else (a * bb + c) & (2 ** 64 - 1))
        elif 'HI' in mods:
            a, bb, c = V(ops[1]), V(ops[2]), V(ops[3], pair=True)
            if None in (a, bb, c):
                wr(th, d, None, g)
            else:
                wr(th, d, ((a * bb + c) >> 32), g)
        elif 'X' in mods:
            a, bb, c = V(ops[1]), V(ops[2]), V(ops[3])
            p = th.pred(ops[4]) if len(ops) > 4 else False
            wr(th, d, None if None in (a, bb, c, p) else a * bb + c + int(p), g)
        else:
            a, bb, c = V(ops[1]), V(ops[2]), V(ops[3])
            wr(th, d, None if None in (a, bb, c) else a * bb + c, g)
    elif b == 'IADD3':
        d = ops[0]
        preds = [o for o in ops[1:] if re.fullmatch(r'!?U?P[0-9T]', o)]
        rest = [o for o in ops[1:] if o not in preds]
        if 'X' in mods:
            # IADD3.X d, [Pc,] a, b, c, Pin, Pin2
            outs = preds[:-2] if len(preds) >= 2 else []
            ins = preds[len(outs):]
            vals = [addend(th, o) for o in rest]
            cin = [th.pred(o) for o in ins]
            if None in vals or None in cin:
                wr(th, d, None, g)
                for o in outs:
                    th.setpred(o, None)
            else:
                s = sum(vals) + sum(int(x) for x in cin)
                wr(th, d, s, g)
                for o in outs:
                    th.setpred(o, bool(s >> 32))
        else:
            vals = [addend(th, o) for o in rest]
            if None in vals:
                wr(th, d, None, g)
                for o in preds:
                    th.setpred(o, None)
            else:
                s = sum(vals)
                wr(th, d, s, g)
                # carries: first predicate the carry of the 3-way sum (enough for address math)
                for i, o in enumerate(preds):
                    th.setpred(o, bool((s >> 32) > i))
    elif b == 'VIADD':
        a, bb = V(ops[1]), V(ops[2])
        wr(th, ops[0], None if None in (a, bb) else a + bb, g)
    elif b in ('VIMNMX', 'VIADDMNMX'):
        signed = 'U32' not in mods
        if b == 'VIMNMX':
            a, bb, p = V(ops[1]), V(ops[2]), th.pred(ops[3])
            x = a
        else:
            a, bb, c, p = V(ops[1]), V(ops[2]), V(ops[3]), th.pred(ops[4])
            x = None if None in (a, bb) else (a + bb) & M32
            bb = c
        if None in (x, bb, p):
            wr(th, ops[0], None, g)
        else:
            xx, yy = (sx(x), sx(bb)) if signed else (x, bb)
            wr(th, ops[0], (min(xx, yy) if p else max(xx, yy)) & M32, g)
    elif b == 'LEA':
        d = ops[0]
        preds = [o for o in ops[1:] if re.fullmatch(r'!?U?P[0-9T]', o)]
        rest = [o for o in ops[1:] if o not in preds]
        if 'HI' in mods:
            if 'X' in mods:
                # LEA.HI.X d, a, b, c, s, Pin   or LEA.HI.X.SX32 d, a, b, s, Pin
                cin = th.pred(preds[-1]) if preds else False
                if 'SX32' in mods:
                    a, bb, s = V(rest[0]), V(rest[1]), V(rest[2])
                    hi = None if a is None else (sx(a) >> 32) & M32
                    v = None if None in (a, bb, s, cin) else (((hi << 32 | a) >> (32 - s)) + bb + int(cin))
                else:
                    a, bb, c, s = V(rest[0]), V(rest[1]), V(rest[2]), V(rest[3])
                    v = None if None in (a, bb, c, s, cin) else (((c << 32 | a) >> (32 - s)) + bb + int(cin))
                wr(th, d, v, g)
            elif 'SX32' in mods:
                a, bb, s = V(rest[0]), V(rest[1]), V(rest[2])
                v = None if None in (a, bb, s) else ((sx(a) >> (32 - s)) & M32) + bb
                wr(th, d, v, g)
                for o in preds:
                    th.setpred(o, None if v is None else bool(v >> 32))
            else:
                a, bb, c, s = V(rest[0]), V(rest[1]), V(rest[2]), V(rest[3])
                v = None if None in (a, bb, c, s) else ((((c << 32 | a) >> (32 - s)) & M32) + bb)
                wr(th, d, v, g)
                for o in preds:
                    th.setpred(o, None if v is None else bool(v >> 32))
        else:
            a, bb, s = V(rest[0]), V(rest[1]), V(rest[2])
            v = None if None in (a, bb, s) else ((a << s) & M32) + bb
            wr(th, d, v, g)
            for o in preds:
                th.setpred(o, None if v is None else bool(v >> 32))
    elif b == 'SHF':
        d, a, s, c = ops[0], V(ops[1]), V(ops[2]), V(ops[3])
        if None in (a, s, c):
            wr(th, d, None, g)
            return
        s &= 63 if ('U64' in mods or 'S64' in mods) else 31
        if 'R' in mods:
            if 'HI' in mods:  # source is c (high word); 32-bit shifts use c
                if 'S32' in mods:
                    v = sx(c) >> s
                elif 'U32' in mods:
                    v = c >> s
                elif 'S64' in mods:
                    v = sx(c) >> s
                else:
                    v = c >> s
            else:
                full = c << 32 | a
                if 'S64' in mods:
                    full = (sx(c) << 32) | a
                v = full >> s
        else:
            if 'HI' in mods:
                v = ((c << 32 | a) << s) >> 32
            else:
                v = a << s
        wr(th, d, v, g)
    elif b == 'LOP3':
        d = ops[0]
        preds = []
        o = ops[1:]
        if re.fullmatch(r'!?U?P[0-9T]', ops[0]):  # LOP3.LUT P0, d, a, b, c, lut, pin
            preds, d, o = [ops[0]], ops[1], ops[2:]
        a, bb, c, lut = V(o[0]), V(o[1]), V(o[2]), V(o[3])
        v = lop3(a, bb, c, lut) if lut is not None else None
        wr(th, d, v, g)
        for p in preds:
            th.setpred(p, None if v is None else v != 0)
    elif b == 'SEL':
        p = th.pred(ops[3])
        wr(th, ops[0], None if p is None else (V(ops[1]) if p else V(ops[2])), g)
    elif b == 'ISETP':
        kind = mods[0]
        signed = 'U32' not in mods
        bop = [m for m in mods if m in ('AND', 'OR', 'XOR')][0]
        pd, pe = ops[0], ops[1]
        a, bb = V(ops[2]), V(ops[3])
        pc_ = th.pred(ops[4])
        if 'EX' in mods:
            low = th.pred(ops[5])
            if None in (a, bb, low):
                r = None
            else:
                aa, bb2 = (sx(a), sx(bb)) if signed else (a, bb)
                if kind == 'EQ':
                    r = aa == bb2 and low
                elif kind == 'NE':
                    r = aa != bb2 or low
                elif kind in ('GT', 'GE'):
                    r = aa > bb2 or (aa == bb2 and low)
                else:
                    r = aa < bb2 or (aa == bb2 and low)
        else:
            r = cmp(kind, a, bb, signed)
        if g is None:
            th.setpred(pd, None); th.setpred(pe, None)
            return
        th.setpred(pd, combine(bop, r, pc_))
        th.setpred(pe, combine(bop, None if r is None else not r, pc_))
    elif b == 'PLOP3':
        pd, pe = ops[0], ops[1]
        xs = [th.pred(o) for o in ops[2:5]]
        l1, l2 = V(ops[5]), V(ops[6])
        if None in xs:
            th.setpred(pd, None); th.setpred(pe, None)
        else:
            idx = int(xs[0]) << 2 | int(xs[1]) << 1 | int(xs[2])
            th.setpred(pd, bool(l1 >> idx & 1))
            th.setpred(pe, bool(l2 >> idx & 1))
    elif b == 'P2R':
        mask = V(ops[3])
        v = 0
        for i in range(7):
            if mask >> i & 1:
                q = th.p.get(i)
                if q is None:
                    v = None
                    break
                v |= int(q) << i
        base_v = V(ops[2])
        wr(th, ops[0], None if v is None or base_v is None else (base_v & ~mask) | v, g)
    elif b == 'R2P':
        v, mask = V(ops[1]), V(ops[2])
        for i in range(7):
            if mask >> i & 1:
                th.p[i] = None if v is None else bool(v >> i & 1)
    elif b in ('S2R', 'S2UR', 'CS2R'):
        s = ops[1]
        v = {'SR_TID.X': th.sregs['tid'], 'SR_CTAID.X': th.sregs['ctaid'], 'SR_LANEID': th.sregs['tid'] & 31,
             'SR_CgaCtaId': 0, 'SR_SWINHI': 0x1, 'SRZ': 0, 'SR_TID.Y': 0, 'SR_TID.Z': 0, 'SR_CTAID.Y': 0,
             'SR_CTAID.Z': 0}.get(s)
        if base == 'CS2R':
            th.setpair(ops[0], 0 if s == 'SRZ' else None)
        else:
            wr(th, ops[0], v, g)
    elif b == 'LDC' or base == 'ULDC':
        o = cboff(th, ops[1])
        w = 8 if '64' in mods else 4
        v = th.cb(o, w) if o is not None else None
        if w == 8:
            th.setpair(ops[0], v)
        else:
            wr(th, ops[0], v, g)
    elif b == 'R2UR':
        wr(th, ops[0], V(ops[1]), g)
    elif b == 'HFMA2' and ops[1] == '-RZ' and ops[2] == 'RZ':
        try:
            h1 = struct.unpack('<H', struct.pack('<e', float(ops[3])))[0]
            h0 = struct.unpack('<H', struct.pack('<e', float(ops[4])))[0]
            wr(th, ops[0], h1 << 16 | h0, g)
        except (ValueError, OverflowError, IndexError):
            wr(th, ops[0], None, g)
    elif b == 'I2F' and 'RP' in mods:
        a = V(ops[1])
        if a is None:
            wr(th, ops[0], None, g)
        else:
            fb = f2b(float(a))  # nearest float32
            if b2f(fb) < a:
                fb += 1  # toward +inf (positive values)
            wr(th, ops[0], fb, g)
    elif b == 'MUFU' and 'RCP' in mods:
        a = V(ops[1])
        wr(th, ops[0], None if a is None or b2f(a) == 0 else f2b(1.0 / b2f(a)), g)
    elif b == 'F2I' and 'U32' in mods and 'TRUNC' in mods:
        a = V(ops[1])
        wr(th, ops[0], None if a is None else int(b2f(a)) & M32, g)
    elif b == 'IABS':
        a = V(ops[1])
        wr(th, ops[0], None if a is None else abs(sx(a)), g)
    elif b in ('BAR', 'BSSY', 'BSYNC', 'WARPSYNC', 'NOP', 'DEPBAR', 'LDGDEPBAR', 'ACQBULK', 'PREEXIT',
               'ENDCOLLECTIVE', 'UBLKPF', 'LDGSTS', 'STS', 'STG', 'ST', 'RED', 'ATOMS', 'ATOMG', 'MEMBAR',
               'FENCE', 'ERRBAR', 'CCTL', 'YIELD', 'VOTEU'):
        if b == 'VOTEU':
            wr(th, ops[0], None, g)
    elif b == 'UMOV':
        wr(th, ops[0], V(ops[1]), g)
    else:
        # everything else: loads, float math, shuffles, dp4a, conversions: unknown results
        dsts = []
        if ops:
            d = ops[0]
            if re.fullmatch(r'!?U?P[0-9T]', d):
                th.setpred(d.lstrip('!'), None)
                if len(ops) > 1 and re.fullmatch(r'U?R(\d+|Z)', ops[1]):
                    dsts.append(ops[1])
            elif re.fullmatch(r'U?R(\d+|Z)', d):
                dsts.append(d)
        width = 4 if '128' in mods else 2 if '64' in mods else 1
        if FAKE_PTR is not None and width == 2 and base in ('LDS', 'LDG', 'LD') and dsts and g:
            # 64-bit loads in k_decode are matrix addresses (mats[s], Wtab[e]): one plausible address
            th.setpair(dsts[0], FAKE_PTR)
            return
        for d in dsts:
            if d in ('RZ', 'URZ'):
                continue
            u = d.startswith('UR')
            n0 = int(d[2:] if u else d[1:])
            for k in range(width):
                (th.ur if u else th.r)[n0 + k] = None
        # ISETP-like float compares write predicates (FSETP): first two operands
        if base == 'FCHK':  # the division's operands are in range: the fast path, not the subroutine
            th.setpred(ops[0], False)
        elif base == 'FSETP':
            for o in ops[:2]:
                if re.fullmatch(r'U?P[0-9]', o):
                    th.setpred(o, None)
