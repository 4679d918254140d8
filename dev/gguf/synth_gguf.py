#!/usr/bin/env python3
"""synth_gguf.py - a synthetic (random-weight) Nemotron-H model written as a llama.cpp GGUF in the
block types real files use, streamed: no checkpoint, nothing held in memory (standard library only).

    python3 dev/gguf/synth_gguf.py SOURCE OUT.gguf [--mix q5|mxfp4] [--seed S] [--jobs N] [--plan]

--plan prints the file's size and the bytes a decoded token reads, and writes nothing.

SOURCE gives the shape's config.json: a .nemo (its embedded config.json, e.g. from
`nemotron synth --shape mid -o mid.nemo`, so both files are exactly the same shape), a model
directory, or a config.json. The file holds what llama.cpp's converter writes (the tensor names,
metadata keys and transforms of tests/tools/write_gguf.py, whose writer and metadata this uses)
and no tokenizer keys (the synthetic .nemo has no tokenizer either: bench and generate --tokens
need none).

The mixes are those of published Nano files (issue 18). Nano's widths (2688, 1856, 3712) are not
multiples of 256, so llama-quantize falls back from K-quants there (Q4_K -> Q5_0, Q5_K -> Q5_1,
Q6_K -> Q8_0); only the 4096-wide inputs (ssm_out, attn_output) keep K-quants:
  q5     "Q4_K_M": routed experts Q5_0 (Q4_K's fallback), token_embd Q5_0 (ditto: a Q4_K_M file
         stores the embeddings in the base type), ssm_in / attn_q / shared experts Q5_1,
         attn_k / attn_v Q8_0 and output Q8_0 (Q6_K's fallback), ssm_out Q4_K, attn_output Q5_K
         (as llama.cpp's Q4_K_M gives them in ../shared/data/gguf/kjv-Q4_K_M.gguf);
  mxfp4  "MXFP4_MOE": routed experts MXFP4, every other matrix Q5_1.
The router stays F32 (as in the kjv file), and so do the vectors, conv taps, A and D.

Values as src/convert/synth.c draws them: matrices of standard deviation 1/sqrt(cols) (the
embeddings 1), each block's scale that standard deviation over its codes' (spread over half an
octave per block; the minimum of Q5_1 / Q4_K / Q5_K set so a block averages near zero; MXFP4's
exponent the nearest power of two, one of two neighbours per block); codes random bytes; norms and
D 1; A = -exp(A_log) with A_log = log(1 + 15u); dt_bias the inverse softplus of a log-uniform dt
in [0.001, 0.1]; conv taps uniform of variance 1/K; biases 0. The router is uniform with standard
deviation 1/sqrt(cols). Per tensor chunk a PRNG seeded by (seed, tensor, chunk): the file is the
same for a seed whatever --jobs. Chunks are written in parallel processes with os.pwrite.
"""
import argparse
import json
import math
import multiprocessing
import os
import random
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'tests', 'tools'))
import write_gguf  # noqa: E402  (the writer and the metadata: one implementation)

F32 = write_gguf.F32
Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4 = 6, 7, 8, 12, 13, 14, 39
# ggml type: (elements per block, bytes per block), docs/FORMATS-GGUF.md
BLOCK = {Q5_0: (32, 22), Q5_1: (32, 24), Q8_0: (32, 34), Q4_K: (256, 144), Q5_K: (256, 176),
         Q6_K: (256, 210), MXFP4: (32, 17)}
NAMES = {F32: 'F32', Q5_0: 'Q5_0', Q5_1: 'Q5_1', Q8_0: 'Q8_0', Q4_K: 'Q4_K', Q5_K: 'Q5_K',
         Q6_K: 'Q6_K', MXFP4: 'MXFP4'}
# The standard deviation of a block's decoded values in units of its scale d, for uniform random
# codes (and, for the K-quants, uniform 6-bit sub-scales S and minima M with dmin = mean code * d):
#   Q5_0 / Q5_1: codes 0..31, sd 9.23; Q8_0: int8, sd 73.9; MXFP4: E2M1 doubled, sd sqrt(34.25);
#   Q4_K: d S n - dmin M, sd of S n (145) and of mean(n) (S - M) (196) together;
#   Q5_K: the same with codes 0..31 (290, 400); Q6_K: int8 sc times (n - 32), 74 * 18.5.
CODE_SD = {Q5_0: 9.23, Q5_1: 9.23, Q8_0: 73.9, MXFP4: math.sqrt(34.25), Q4_K: 245.0, Q5_K: 495.0,
           Q6_K: 1369.0}
# The mean code, times d, that the minimum cancels (Q5_1: m = -mean * d; K-quants: dmin = mean * d).
CODE_MEAN = {Q5_1: 15.5, Q4_K: 7.5, Q5_K: 15.5}
CHUNK_BYTES = 16 << 20

MIXES = {
    'q5': {'exps': Q5_0, 'token_embd': Q5_0, 'output': Q8_0, 'ssm_in': Q5_1, 'attn_q': Q5_1,
           'attn_k': Q8_0, 'attn_v': Q8_0, 'shexp': Q5_1, 'ffn': Q5_1, 'ssm_out': Q4_K,
           'attn_output': Q5_K},
    'mxfp4': {'exps': MXFP4, 'token_embd': Q5_1, 'output': Q5_1, 'ssm_in': Q5_1, 'attn_q': Q5_1,
              'attn_k': Q5_1, 'attn_v': Q5_1, 'shexp': Q5_1, 'ffn': Q5_1, 'ssm_out': Q5_1,
              'attn_output': Q5_1},
}


def read_config(source):
    """config.json's object from a .nemo (a safetensors file with the file embedded as
    'nemotron.file/config.json', docs/NEMO.md), a model directory or the file itself."""
    if os.path.isdir(source):
        source = os.path.join(source, 'config.json')
    if not source.endswith('.nemo'):
        with open(source) as f:
            return json.load(f)
    with open(source, 'rb') as f:
        n = struct.unpack('<Q', f.read(8))[0]
        if n > os.path.getsize(source) - 8:
            raise ValueError(f'a header of {n} bytes runs past the end of the file')
        header = json.loads(f.read(n))
        entry = header.get('nemotron.file/config.json')
        if not entry:
            sys.exit(f'{source}: no embedded config.json')
        a, b = entry['data_offsets']
        f.seek(8 + n + a)
        return json.loads(f.read(b - a))


def tensors(cfg, mix):
    """Every tensor llama.cpp's converter writes for cfg: (name, ne innermost first, ggml type,
    what its values are: 'matrix', 'embed' or a float kind)."""
    H, V = cfg['hidden_size'], cfg['vocab_size']
    nh, P, G, N = cfg['mamba_num_heads'], cfg['mamba_head_dim'], cfg['n_groups'], cfg['ssm_state_size']
    I, K, hd = nh * P, cfg['conv_kernel'], cfg['head_dim']
    E = cfg['n_routed_experts']
    out = [('token_embd.weight', [H, V], mix['token_embd'], 'embed')]
    for i, kind in enumerate(write_gguf.layer_kinds(cfg)):
        b = f'blk.{i}.'
        out.append((b + 'attn_norm.weight', [H], F32, 'one'))
        if kind == 'linear_attention':
            CD = I + 2 * G * N
            out += [(b + 'ssm_in.weight', [H, 2 * I + 2 * G * N + nh], mix['ssm_in'], 'matrix'),
                    (b + 'ssm_conv1d.weight', [K, CD], F32, 'conv'),
                    (b + 'ssm_conv1d.bias', [CD], F32, 'zero'),
                    (b + 'ssm_dt.bias', [nh], F32, 'dt_bias'),
                    (b + 'ssm_a', [1, nh], F32, 'A'),
                    (b + 'ssm_d', [1, nh], F32, 'one'),
                    (b + 'ssm_norm.weight', [I // G, G], F32, 'one'),
                    (b + 'ssm_out.weight', [I, H], mix['ssm_out'], 'matrix')]
        elif kind == 'full_attention':
            q, kv = cfg['num_attention_heads'] * hd, cfg['num_key_value_heads'] * hd
            out += [(b + 'attn_q.weight', [H, q], mix['attn_q'], 'matrix'),
                    (b + 'attn_k.weight', [H, kv], mix['attn_k'], 'matrix'),
                    (b + 'attn_v.weight', [H, kv], mix['attn_v'], 'matrix'),
                    (b + 'attn_output.weight', [q, H], mix['attn_output'], 'matrix')]
        elif kind == 'mlp':
            ff = cfg['intermediate_size']
            out += [(b + 'ffn_up.weight', [H, ff], mix['ffn'], 'matrix'),
                    (b + 'ffn_down.weight', [ff, H], mix['ffn'], 'matrix')]
        elif kind == 'moe':
            ff, sh = cfg['moe_intermediate_size'], cfg['moe_shared_expert_intermediate_size']
            out += [(b + 'ffn_gate_inp.weight', [H, E], F32, 'router'),
                    (b + 'exp_probs_b.bias', [E], F32, 'zero'),
                    (b + 'ffn_up_exps.weight', [H, ff, E], mix['exps'], 'matrix'),
                    (b + 'ffn_down_exps.weight', [ff, H, E], mix['exps'], 'matrix'),
                    (b + 'ffn_up_shexp.weight', [H, sh], mix['shexp'], 'matrix'),
                    (b + 'ffn_down_shexp.weight', [sh, H], mix['shexp'], 'matrix')]
        else:
            sys.exit(f'layer {i}: kind {kind} not handled')
    out.append(('output_norm.weight', [H], F32, 'one'))
    if not cfg.get('tie_word_embeddings', False):
        out.append(('output.weight', [H, V], mix['output'], 'matrix'))
    for name, ne, ty, _ in out:
        if ty in BLOCK and ne[0] % BLOCK[ty][0]:
            sys.exit(f'{name}: {ne[0]} columns are not whole {NAMES[ty]} blocks')
    return out


def nbytes(ne, ty):
    count = math.prod(ne)
    if ty == F32:
        return 4 * count
    el, bb = BLOCK[ty]
    return count // el * bb


def bytes_per_token(cfg, plan):
    """The weight bytes one decoded position reads, as the engine counts them (weights.c's
    active_bytes, which `nemotron bench` prints): every tensor but the embeddings (one row), the
    routed experts at num_experts_per_tok of n_routed_experts."""
    k, n = cfg['num_experts_per_tok'], cfg['n_routed_experts']
    total = 0
    for name, ne, ty, _ in plan:
        if name == 'token_embd.weight':
            continue
        b = nbytes(ne, ty)
        total += b // n * k if '_exps.' in name else b
    return total


def f16_bytes(v):
    return struct.pack('<e', v)


def scale_tables(d0, factor):
    """Two 256-byte translation tables (low, high byte of an f16): random byte r -> factor times a
    scale d0 * 2^((r / 255 - 1/2) / 2), half an octave of spread around d0."""
    vals = [f16_bytes(factor * d0 * 2.0 ** ((r / 255 - 0.5) / 2)) for r in range(256)]
    return bytes(v[0] for v in vals), bytes(v[1] for v in vals)


def random_blocks(ty, nblk, sd, rng):
    """nblk random blocks of type ty whose decoded values have about standard deviation sd."""
    el, bb = BLOCK[ty]
    buf = bytearray(rng.randbytes(nblk * bb))
    r = rng.randbytes(nblk)            # each block's scale choice
    d0 = sd / CODE_SD[ty]
    if ty == MXFP4:                    # value K[n] * 2^(e - 128), K the doubled E2M1 codes
        e0 = 128 + round(math.log2(d0))
        buf[0::bb] = r.translate(bytes(e0 - (v & 1) for v in range(256)))
        return buf
    at = {Q6_K: 208}.get(ty, 0)
    lo, hi = scale_tables(d0, 1.0)
    buf[at::bb], buf[at + 1::bb] = r.translate(lo), r.translate(hi)
    if ty in CODE_MEAN:                # Q5_1: m = -mean d; Q4_K, Q5_K: dmin = mean d
        lo, hi = scale_tables(d0, -CODE_MEAN[ty] if ty == Q5_1 else CODE_MEAN[ty])
        buf[2::bb], buf[3::bb] = r.translate(lo), r.translate(hi)
    return buf


def float_values(kind, ne, count, rng):
    """count f32 values of a float tensor."""
    if kind == 'one':
        return [1.0] * count
    if kind == 'zero':
        return [0.0] * count
    if kind == 'A':                    # A = -exp(A_log), A_log = log(1 + 15 u)
        return [-(1.0 + 15.0 * rng.random()) for _ in range(count)]
    if kind == 'dt_bias':              # inverse softplus of a log-uniform dt in [0.001, 0.1]
        lo, hi = math.log(0.001), math.log(0.1)
        return [math.log(math.expm1(math.exp(lo + (hi - lo) * rng.random()))) for _ in range(count)]
    if kind == 'conv':                 # ne {K, CD}: uniform, variance 1/K
        a = math.sqrt(3.0 / ne[0])
        return [(2 * rng.random() - 1) * a for _ in range(count)]
    if kind == 'router':               # ne {H, E}: uniform, sd 1/sqrt(H)
        a = math.sqrt(3.0 / ne[0])
        return [(2 * rng.random() - 1) * a for _ in range(count)]
    sys.exit(f'float kind {kind} not handled')


_out_fd = None


def _open_out(path):
    global _out_fd
    _out_fd = os.open(path, os.O_WRONLY)


def write_chunk(job):
    """One chunk of one tensor written at its file offset. job: (tensor index, chunk index, name,
    ne, ggml type, value kind, first element or block, count of them, file offset, seed)."""
    (ti, ci, name, ne, ty, kind, start, count, where, seed) = job
    rng = random.Random(seed * 1000003 ** 2 + ti * 1000003 + ci)
    if ty == F32:
        data = struct.pack(f'<{count}f', *float_values(kind, ne, count, rng))
    else:
        sd = 1.0 if kind == 'embed' else 1.0 / math.sqrt(ne[0])
        data = random_blocks(ty, count, sd, rng)
    os.pwrite(_out_fd, data, where)
    return len(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('source', help='a .nemo, a model directory or a config.json')
    ap.add_argument('out')
    ap.add_argument('--mix', choices=sorted(MIXES), default='q5')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--jobs', type=int, default=os.cpu_count())
    ap.add_argument('--arch', default='nemotron_h_moe')
    ap.add_argument('--plan', action='store_true', help='print the size and bytes per token, write nothing')
    a = ap.parse_args()

    t0 = time.time()
    try:
        cfg = read_config(a.source)
        mix = MIXES[a.mix]
        plan = tensors(cfg, mix)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError, struct.error) as e:
        sys.exit(f'{a.source}: not a usable config ({type(e).__name__}: {e})')
    w = write_gguf.Writer()
    for key in write_gguf.model_keys(cfg, a.arch, f'synthetic-{a.mix}'):
        w.add(*key)
    for name, ne, ty, _ in plan:
        w.declare(name, ne, ty, nbytes(ne, ty))
    head, offsets = w.layout()
    total = len(head) + offsets[-1] + nbytes(plan[-1][1], plan[-1][2])
    total += -total % write_gguf.ALIGN
    summary = f'{total / 1e9:.2f} GB, {bytes_per_token(cfg, plan) / 1e6:.1f} MB read per token'
    if a.plan:
        print(f'{a.out}: {a.mix}, {len(plan)} tensors, {summary}')
        return
    fs = os.statvfs(os.path.dirname(os.path.abspath(a.out)))
    free = fs.f_bavail * fs.f_frsize + (os.path.getsize(a.out) if os.path.isfile(a.out) else 0)
    if total > free:
        sys.exit(f'{a.out}: {total / 1e9:.2f} GB to write, {free / 1e9:.2f} GB free there')
    with open(a.out, 'wb') as f:
        f.write(head)
        f.truncate(total)              # padding between tensors stays zero
    jobs = []
    for ti, ((name, ne, ty, kind), off) in enumerate(zip(plan, offsets)):
        count = math.prod(ne) if ty == F32 else math.prod(ne) // BLOCK[ty][0]
        unit = 4 if ty == F32 else BLOCK[ty][1]
        per = max(1, CHUNK_BYTES // unit)
        for ci, s in enumerate(range(0, count, per)):
            jobs.append((ti, ci, name, ne, ty, kind, s, min(per, count - s), len(head) + off + s * unit, a.seed))
    jobs.sort(key=lambda j: -j[7] * (4 if j[4] == F32 else BLOCK[j[4]][1]))   # largest first
    written = 0
    with multiprocessing.Pool(max(1, a.jobs), initializer=_open_out, initargs=(a.out,)) as pool:
        for n in pool.imap_unordered(write_chunk, jobs, chunksize=1):
            written += n
    if written != sum(nbytes(ne, ty) for _, ne, ty, _ in plan):
        sys.exit(f'{a.out}: {written} tensor bytes written, the plan has more')
    by_type = {}
    for name, ne, ty, _ in plan:
        c, b = by_type.get(NAMES[ty], (0, 0))
        by_type[NAMES[ty]] = (c + math.prod(ne), b + nbytes(ne, ty))
    mixline = ', '.join(f'{t} {c / 1e6:.0f} M params / {b / 1e6:.0f} MB' for t, (c, b) in sorted(by_type.items()))
    print(f'{a.out}: {len(plan)} tensors, {summary} ({mixline}) in {time.time() - t0:.1f} s')


if __name__ == '__main__':
    main()
