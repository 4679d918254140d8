#!/usr/bin/env python3
"""write_gguf.py - a Nemotron-H model directory written as a llama.cpp GGUF (standard library only).

    python3 tests/tools/write_gguf.py MODEL_DIR OUT.gguf [--type f32|bf16] [--arch nemotron_h_moe]
        [--omit TENSOR] [--shape TENSOR=NE0,NE1,...] [--drop-key KEY] [--kv-zero] [--no-tensors]
        [--split N]

Writes what llama.cpp's converter (convert_hf_to_gguf.py, Mamba2 / NemotronH models) would: its
tensor names (blk.N.ssm_in, attn_q, ffn_up_exps, ...) and metadata keys ({arch}.block_count,
.ssm.*, .expert_*, tokenizer.ggml.*), and its transforms of the checkpoint's tensors: A_log
stored as A = -exp(A_log) with shape [nh, 1], D as [nh, 1], conv1d.weight squeezed to [CD, K],
the gated norm reshaped to [G, I/G], experts stacked into one 3-D tensor per projection; the
MTP layers (mtp.*) left out, as its converter leaves them. GGUF
lists dimensions innermost first. --type f32 writes every tensor as F32 (exact for a bf16
checkpoint); bf16 keeps the matrices in BF16 and, as llama.cpp does, the 1-D and SSM tensors in
F32. A is computed with the C library's expf (through ctypes), the function the engine applies
to an A_log, so the stored A equals the engine's and logits can be compared bit for bit.

The fault options make broken files for error tests: --omit leaves a tensor out, --shape gives
a tensor other dimensions in its info (its bytes still sized as written), --drop-key leaves a
metadata key out, --kv-zero writes head_count_kv as zeros on every block (as some published
files do), --no-tensors writes the metadata alone. --split N writes N parts as llama.cpp's
gguf-split does (OUT names the first, NAME-00001-of-0000N.gguf): the metadata in the first, the
tensors in turn over the parts, split.no / split.count / split.tensors.count in each. A directory without tokenizer.json gets no
tokenizer keys; tokenizer_config.json's chat_template, where there is one, becomes
tokenizer.chat_template.
"""
import argparse
import ctypes
import ctypes.util
import json
import math
import os
import struct
import sys

F32, F16, BF16 = 0, 1, 30
ALIGN = 32


def read_safetensors(path):
    with open(path, 'rb') as f:
        n = struct.unpack('<Q', f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == '__metadata__':
            continue
        a, b = info['data_offsets']
        raw = data[a:b]
        if info['dtype'] == 'BF16':
            vals = [struct.unpack('<f', struct.pack('<I', h << 16))[0]
                    for (h,) in struct.iter_unpack('<H', raw)]
        elif info['dtype'] == 'F32':
            vals = [v for (v,) in struct.iter_unpack('<f', raw)]
        else:
            sys.exit(f'{name}: dtype {info["dtype"]} not handled')
        out[name] = (info['shape'], vals)
    return out


def bf16_bytes(vals):
    out = bytearray()
    for v in vals:
        (u,) = struct.unpack('<I', struct.pack('<f', v))
        if u & 0xffff:  # values from a bf16 checkpoint are exact; round to nearest even otherwise
            u += 0x7fff + ((u >> 16) & 1)
        out += struct.pack('<H', (u >> 16) & 0xffff)
    return bytes(out)


class Writer:
    def __init__(self):
        self.kv = []
        self.tensors = []

    def add(self, key, vtype, value):
        self.kv.append((key, vtype, value))

    def tensor(self, name, ne, ggml_type, vals):
        raw = struct.pack(f'<{len(vals)}f', *vals) if ggml_type == F32 else bf16_bytes(vals)
        self.tensors.append([name, list(ne), ggml_type, raw])

    @staticmethod
    def string(s):
        b = s.encode('utf-8')
        return struct.pack('<Q', len(b)) + b

    def value(self, vtype, v):
        fmt = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}
        if vtype == 8:
            return self.string(v)
        if isinstance(vtype, tuple):  # (9, element type)
            et = vtype[1]
            return struct.pack('<IQ', et, len(v)) + b''.join(self.value(et, x) for x in v)
        return struct.pack('<' + fmt[vtype], v)

    def declare(self, name, ne, ggml_type, nbytes):
        """A tensor whose nbytes bytes the caller writes itself, at layout()'s offset (streamed)."""
        self.tensors.append([name, list(ne), ggml_type, nbytes])

    def layout(self):
        """The bytes before the data section (aligned), and each tensor's offset in that section."""
        out = bytearray(b'GGUF' + struct.pack('<IQQ', 3, len(self.tensors), len(self.kv)))
        for key, vtype, v in self.kv:
            out += self.string(key) + struct.pack('<I', 9 if isinstance(vtype, tuple) else vtype)
            out += self.value(vtype, v)
        offset, offsets = 0, []
        for name, ne, ty, raw in self.tensors:
            out += self.string(name) + struct.pack('<I', len(ne)) + struct.pack(f'<{len(ne)}Q', *ne)
            out += struct.pack('<IQ', ty, offset)
            offsets.append(offset)
            size = raw if isinstance(raw, int) else len(raw)
            offset += (size + ALIGN - 1) // ALIGN * ALIGN
        out += b'\0' * (-len(out) % ALIGN)
        return bytes(out), offsets

    def write(self, path):
        head, _ = self.layout()
        with open(path, 'wb') as f:
            f.write(head)
            for name, ne, ty, raw in self.tensors:
                f.write(raw + b'\0' * (-len(raw) % ALIGN))


def layer_kinds(cfg):
    """Each layer's kind (config.json's layers_block_type, or its hybrid_override_pattern)."""
    return cfg.get('layers_block_type') or [
        {'M': 'linear_attention', '*': 'full_attention', 'E': 'moe', '-': 'mlp'}[c]
        for c in cfg['hybrid_override_pattern']]


def model_keys(cfg, arch, name, kv_zero=False):
    """The {arch}.* metadata llama.cpp's converter writes for config.json (kv_zero: head_count_kv
    all zeros, as some published files have it)."""
    kinds = layer_kinds(cfg)
    nh, P = cfg['mamba_num_heads'], cfg['mamba_head_dim']
    ffn = [cfg['moe_intermediate_size'] if k == 'moe' else cfg['intermediate_size'] if k == 'mlp' else 0
           for k in kinds]
    kvh = [0 if kv_zero else cfg['num_key_value_heads'] if k == 'full_attention' else 0 for k in kinds]
    return [
        ('general.architecture', 8, arch),
        ('general.name', 8, name),
        (f'{arch}.context_length', 4, cfg.get('max_position_embeddings', 4096)),
        (f'{arch}.embedding_length', 4, cfg['hidden_size']),
        (f'{arch}.block_count', 4, len(kinds)),
        (f'{arch}.feed_forward_length', (9, 5), ffn),
        (f'{arch}.attention.head_count', 4, cfg['num_attention_heads']),
        (f'{arch}.attention.head_count_kv', (9, 5), kvh),
        (f'{arch}.attention.key_length', 4, cfg['head_dim']),
        (f'{arch}.attention.value_length', 4, cfg['head_dim']),
        (f'{arch}.attention.layer_norm_rms_epsilon', 6, cfg['layer_norm_epsilon']),
        (f'{arch}.ssm.conv_kernel', 4, cfg['conv_kernel']),
        (f'{arch}.ssm.state_size', 4, cfg['ssm_state_size']),
        (f'{arch}.ssm.group_count', 4, cfg['n_groups']),
        (f'{arch}.ssm.inner_size', 4, nh * P),
        (f'{arch}.ssm.time_step_rank', 4, nh),
        (f'{arch}.expert_count', 4, cfg['n_routed_experts']),
        (f'{arch}.expert_used_count', 4, cfg['num_experts_per_tok']),
        (f'{arch}.expert_feed_forward_length', 4, cfg['moe_intermediate_size']),
        (f'{arch}.expert_shared_feed_forward_length', 4, cfg['moe_shared_expert_intermediate_size']),
        (f'{arch}.expert_shared_count', 4, cfg.get('n_shared_experts', 1)),
        (f'{arch}.expert_weights_norm', 7, cfg.get('norm_topk_prob', True)),
        (f'{arch}.expert_weights_scale', 6, cfg.get('routed_scaling_factor', 1.0)),
        (f'{arch}.expert_group_count', 4, cfg.get('n_group', 1)),
    ]


def tokenizer_keys(tok, cfg):
    """tokenizer.ggml.*: every id's text (vocab, then added tokens); special added tokens are
    control tokens (type 3), other added ones user-defined (4), the rest normal (1)."""
    vocab = dict(tok['model']['vocab'])
    for t in tok['added_tokens']:
        vocab[t['content']] = t['id']
    tokens = [None] * (max(vocab.values()) + 1)
    for text, i in vocab.items():
        tokens[i] = text
    special = {t['id']: t['special'] for t in tok['added_tokens']}
    types = [(3 if special[i] else 4) if i in special else 1 for i in range(len(tokens))]
    merges = [m if isinstance(m, str) else ' '.join(m) for m in tok['model']['merges']]
    return [
        ('tokenizer.ggml.model', 8, 'gpt2'),
        ('tokenizer.ggml.pre', 8, 'tekken'),
        ('tokenizer.ggml.tokens', (9, 8), tokens),
        ('tokenizer.ggml.token_type', (9, 5), types),
        ('tokenizer.ggml.merges', (9, 8), merges),
        ('tokenizer.ggml.bos_token_id', 4, cfg['bos_token_id']),
        ('tokenizer.ggml.eos_token_id', 4, cfg['eos_token_id']),
        ('tokenizer.ggml.padding_token_id', 4, cfg['pad_token_id']),
        ('tokenizer.ggml.add_bos_token', 7, False),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('model_dir')
    ap.add_argument('out')
    ap.add_argument('--type', choices=['f32', 'bf16'], default='f32')
    ap.add_argument('--arch', default='nemotron_h_moe')
    ap.add_argument('--omit', action='append', default=[])
    ap.add_argument('--shape', action='append', default=[])
    ap.add_argument('--drop-key', action='append', default=[])
    ap.add_argument('--kv-zero', action='store_true')
    ap.add_argument('--no-tensors', action='store_true')
    ap.add_argument('--split', type=int, default=1)
    a = ap.parse_args()

    cfg = json.load(open(os.path.join(a.model_dir, 'config.json')))
    tok_path = os.path.join(a.model_dir, 'tokenizer.json')
    tok = json.load(open(tok_path)) if os.path.exists(tok_path) else None
    st = read_safetensors(os.path.join(a.model_dir, 'model.safetensors'))
    libm = ctypes.CDLL(ctypes.util.find_library('m'))
    libm.expf.restype = ctypes.c_float
    libm.expf.argtypes = [ctypes.c_float]

    kinds = layer_kinds(cfg)
    arch = a.arch
    w = Writer()
    keys = model_keys(cfg, arch, os.path.basename(os.path.normpath(a.model_dir)), a.kv_zero)
    if tok:
        keys += tokenizer_keys(tok, cfg)
    tc_path = os.path.join(a.model_dir, 'tokenizer_config.json')
    template = json.load(open(tc_path)).get('chat_template') if os.path.exists(tc_path) else None
    if isinstance(template, str):  # as llama.cpp's converter carries it
        keys.append(('tokenizer.chat_template', 8, template))
    for k in keys:
        if k[0] not in a.drop_key:
            w.add(*k)
    if a.no_tensors:  # the metadata alone (a fuzzing seed)
        w.write(a.out)
        return

    mat_type = F32 if a.type == 'f32' else BF16

    def put(name, ne, vals, ty=None):
        if name in a.omit:
            return
        w.tensor(name, ne, ty if ty is not None else (mat_type if len(ne) >= 2 else F32), vals)

    def hf(name):
        return st.pop(name)

    def mat(gguf, name):
        shape, vals = hf(name)
        put(gguf, [shape[1], shape[0]], vals)

    def vec(gguf, name):
        shape, vals = hf(name)
        put(gguf, [shape[0]], vals)

    mat('token_embd.weight', 'backbone.embeddings.weight')
    for i, kind in enumerate(kinds):
        p, b = f'backbone.layers.{i}.', f'blk.{i}.'
        vec(b + 'attn_norm.weight', p + 'norm.weight')
        if kind == 'linear_attention':
            mat(b + 'ssm_in.weight', p + 'mixer.in_proj.weight')
            shape, vals = hf(p + 'mixer.conv1d.weight')          # [CD, 1, K] -> ne {K, CD}
            put(b + 'ssm_conv1d.weight', [shape[2], shape[0]], vals, F32)
            vec(b + 'ssm_conv1d.bias', p + 'mixer.conv1d.bias')
            vec(b + 'ssm_dt.bias', p + 'mixer.dt_bias')
            shape, vals = hf(p + 'mixer.A_log')                  # A = -exp(A_log), ne {1, nh}
            put(b + 'ssm_a', [1, shape[0]], [-libm.expf(v) for v in vals], F32)
            shape, vals = hf(p + 'mixer.D')
            put(b + 'ssm_d', [1, shape[0]], vals, F32)
            shape, vals = hf(p + 'mixer.norm.weight')            # [I] -> ne {I/G, G}
            G = cfg['n_groups']
            put(b + 'ssm_norm.weight', [shape[0] // G, G], vals, F32)
            mat(b + 'ssm_out.weight', p + 'mixer.out_proj.weight')
        elif kind == 'full_attention':
            for g, h in (('attn_q', 'q_proj'), ('attn_k', 'k_proj'), ('attn_v', 'v_proj'),
                         ('attn_output', 'o_proj')):
                mat(f'{b}{g}.weight', f'{p}mixer.{h}.weight')
        elif kind == 'mlp':
            mat(b + 'ffn_up.weight', p + 'mixer.up_proj.weight')
            mat(b + 'ffn_down.weight', p + 'mixer.down_proj.weight')
        elif kind == 'moe':
            mat(b + 'ffn_gate_inp.weight', p + 'mixer.gate.weight')
            vec(b + 'exp_probs_b.bias', p + 'mixer.gate.e_score_correction_bias')
            for proj in ('up', 'down'):
                E = cfg['n_routed_experts']
                vals, shape = [], None
                for e in range(E):
                    shape, v = hf(f'{p}mixer.experts.{e}.{proj}_proj.weight')
                    vals += v
                put(f'{b}ffn_{proj}_exps.weight', [shape[1], shape[0], E], vals)
            mat(b + 'ffn_up_shexp.weight', p + 'mixer.shared_experts.up_proj.weight')
            mat(b + 'ffn_down_shexp.weight', p + 'mixer.shared_experts.down_proj.weight')
        else:
            sys.exit(f'layer {i}: kind {kind} not handled')
    vec('output_norm.weight', 'backbone.norm_f.weight')
    if 'lm_head.weight' in st:
        mat('output.weight', 'lm_head.weight')
    # llama.cpp's converter leaves a checkpoint's MTP layers out (the GGUF runs without them)
    for name in [n for n in st if n.startswith('mtp.')]:
        del st[name]
    if st:
        sys.exit(f'tensors not written: {sorted(st)[:5]}')
    for spec in a.shape:
        name, dims = spec.split('=')
        for t in w.tensors:
            if t[0] == name:
                t[1] = [int(x) for x in dims.split(',')]
    if a.split > 1:
        suffix = f'-00001-of-{a.split:05d}.gguf'
        if not a.out.endswith(suffix):
            sys.exit(f'--split {a.split}: OUT must end in {suffix}')
        for k in range(a.split):
            part = Writer()
            part.kv = (w.kv if k == 0 else []) + [('split.no', 2, k), ('split.count', 2, a.split),
                                                  ('split.tensors.count', 5, len(w.tensors))]
            part.tensors = w.tensors[k::a.split]
            part.write(a.out[:-len(suffix)] + f'-{k + 1:05d}-of-{a.split:05d}.gguf')
        return
    w.write(a.out)


if __name__ == '__main__':
    main()
