"""mtp.py - one Nemotron-H multi-token-prediction step (MTP pattern "*E") in plain torch.

Written from the math of ../shared/design/MODEL.md 2.4 and 3.8 (vLLM's nemotron_h_mtp.py agrees),
independent of the C engine and of transformers (which has no MTP). tools/train_demo.py --mtp
trains it; tools/reference/mtp_reference.py evaluates it in float32 for the engine's fixtures.

For position t, with e = E_emb[token_{t+1}] and h = the main model's hidden state at t after
norm_f (or, when drafting a chain, the previous MTP position's output):

    x0  = concat(rmsnorm(e, enorm), rmsnorm(h, hnorm)) @ eh_proj^T     eh_proj [H, 2H], e half first
    x1  = x0 + Attn(rmsnorm(x0, layers.0.norm))      causal GQA over the MTP's own positions, no RoPE
    x2  = x1 + MoE(rmsnorm(x1, layers.1.norm))       the main model's MoE block (MODEL.md 3.6)
    out = rmsnorm(x2, layers.1.final_layernorm);     draft logits = out @ lm_head^T (shared)

The module tree mirrors the checkpoint names: state_dict() key K is the file's "mtp." + K, so
loading a file with load_state_dict(strict=True) checks every name and shape.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

PREFIX = "mtp."


def rmsnorm(x, w, eps):
    """w * x / sqrt(mean(x^2) + eps), computed in float32 (MODEL.md 3.2)."""
    x = x.float()
    return w.float() * (x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def relu2(x):
    return torch.relu(x).square()


class Norm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(size)), eps

    def forward(self, x):
        return rmsnorm(x, self.weight, self.eps)


def linear(n_in, n_out):
    return nn.Linear(n_in, n_out, bias=False)


class KVCache:
    """The MTP attention's keys and values of every position so far, [B, S, nkv, d] each."""

    def __init__(self):
        self.k = self.v = None

    def append(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], 1)
        self.v = v if self.v is None else torch.cat([self.v, v], 1)
        return self.k, self.v


class Attention(nn.Module):
    """Causal GQA without positional encoding; query head j reads key/value head j / (nq / nkv)."""

    def __init__(self, cfg):
        super().__init__()
        H, self.nq, self.nkv, self.d = cfg.hidden, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.q_proj, self.o_proj = linear(H, self.nq * self.d), linear(self.nq * self.d, H)
        self.k_proj, self.v_proj = linear(H, self.nkv * self.d), linear(H, self.nkv * self.d)

    def forward(self, x, cache=None):                        # x [B, T, H]
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.nq, self.d)
        k = self.k_proj(x).view(B, T, self.nkv, self.d)
        v = self.v_proj(x).view(B, T, self.nkv, self.d)
        if cache is not None:
            k, v = cache.append(k, v)
        S = k.shape[1]
        first = S - T                                        # absolute position of x[:, 0]
        k = k.repeat_interleave(self.nq // self.nkv, dim=2)
        v = v.repeat_interleave(self.nq // self.nkv, dim=2)
        s = torch.einsum("bthd,bshd->bhts", q.float(), k.float()) / math.sqrt(self.d)
        seen = torch.arange(S, device=x.device)[None, :] <= first + torch.arange(T, device=x.device)[:, None]
        p = torch.softmax(s.masked_fill(~seen, float("-inf")), dim=-1)
        o = torch.einsum("bhts,bshd->bthd", p, v.float()).reshape(B, T, self.nq * self.d)
        return self.o_proj(o.to(x.dtype))


class MLP(nn.Module):
    """up -> relu^2 -> down, no bias: a routed expert or the shared expert."""

    def __init__(self, n_in, n_mid):
        super().__init__()
        self.up_proj, self.down_proj = linear(n_in, n_mid), linear(n_mid, n_in)

    def forward(self, x):
        return self.down_proj(relu2(self.up_proj(x)))


class Gate(nn.Module):
    """The router: its forward gives the float32 router logits. The correction bias (F32 in the
    file) is a buffer: it is nudged towards even load, never trained by gradient."""

    def __init__(self, n_experts, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_experts, hidden))
        self.register_buffer("e_score_correction_bias", torch.zeros(n_experts))

    def forward(self, x):
        return x.float() @ self.weight.float().T


class MoE(nn.Module):
    """MODEL.md 3.6: sigmoid router, the correction bias for selection only, group-limited top-k,
    weights from the unbiased scores (normalised when norm_topk_prob, times routed_scaling_factor),
    routed experts in the latent space when moe_latent_size, the shared expert on the full input."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        inner = cfg.latent or cfg.hidden
        self.gate = Gate(cfg.n_experts, cfg.hidden)
        self.experts = nn.ModuleList(MLP(inner, cfg.moe_inter) for _ in range(cfg.n_experts))
        self.shared_experts = MLP(cfg.hidden, cfg.shared_inter)
        if cfg.latent:
            self.fc1_latent_proj, self.fc2_latent_proj = linear(cfg.hidden, inner), linear(inner, cfg.hidden)

    def select(self, scores):
        """Expert indices [N, k] from the sigmoid scores plus the correction bias."""
        c = self.cfg
        sc = scores.detach() + self.gate.e_score_correction_bias.float()
        if c.n_group > 1:
            grouped = sc.view(sc.shape[0], c.n_group, -1)
            group_score = grouped.topk(2, dim=-1).values.sum(-1)           # [N, G]
            keep = torch.zeros_like(group_score, dtype=torch.bool)
            keep.scatter_(1, group_score.topk(c.topk_group, dim=-1).indices, True)
            sc = grouped.masked_fill(~keep[:, :, None], float("-inf")).view_as(sc)
        return sc.topk(c.top_k, dim=-1).indices

    def forward(self, x):                                    # x [..., H]
        c, shape = self.cfg, x.shape
        x = x.reshape(-1, shape[-1])
        scores = torch.sigmoid(self.gate(x))                 # [N, E] float32
        idx = self.select(scores)
        w = scores.gather(1, idx)
        if c.norm_topk_prob:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        w = w * c.routed_scaling_factor
        xl = self.fc1_latent_proj(x) if c.latent else x
        y = torch.zeros(xl.shape, dtype=torch.float32, device=x.device)
        for j, expert in enumerate(self.experts):
            rows, slot = (idx == j).nonzero(as_tuple=True)
            if rows.numel():
                y = y.index_add(0, rows, w[rows, slot, None] * expert(xl[rows]).float())
        y = y.to(x.dtype)
        if c.latent:
            y = self.fc2_latent_proj(y)
        return (y + self.shared_experts(x)).view(shape)


class AttentionLayer(nn.Module):                             # mtp.layers.0
    def __init__(self, cfg):
        super().__init__()
        H = cfg.hidden
        self.enorm, self.hnorm, self.norm = Norm(H, cfg.eps), Norm(H, cfg.eps), Norm(H, cfg.eps)
        self.eh_proj = linear(2 * H, H)
        self.mixer = Attention(cfg)


class MoELayer(nn.Module):                                   # mtp.layers.1
    def __init__(self, cfg):
        super().__init__()
        self.norm, self.final_layernorm = Norm(cfg.hidden, cfg.eps), Norm(cfg.hidden, cfg.eps)
        self.mixer = MoE(cfg)


class MTPConfig:
    """The main model's config.json values that size the MTP step (it shares its block kinds)."""

    def __init__(self, c):
        self.hidden = c["hidden_size"]
        self.n_heads, self.n_kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
        self.head_dim = c.get("head_dim") or self.hidden // self.n_heads
        self.n_experts, self.top_k = c["n_routed_experts"], c["num_experts_per_tok"]
        self.moe_inter, self.shared_inter = c["moe_intermediate_size"], c["moe_shared_expert_intermediate_size"]
        self.latent = c.get("moe_latent_size") or None
        self.n_group, self.topk_group = c.get("n_group", 1) or 1, c.get("topk_group", 1) or 1
        self.norm_topk_prob = c.get("norm_topk_prob", True)
        self.routed_scaling_factor = float(c.get("routed_scaling_factor", 1.0))
        self.eps = float(c.get("layer_norm_epsilon", 1e-5))


def mtp_pattern(c):
    """The config's MTP block pattern as a string ("*E" when it names none)."""
    if c.get("mtp_hybrid_override_pattern"):
        return c["mtp_hybrid_override_pattern"]
    kinds = {"full_attention": "*", "attention": "*", "moe": "E"}
    if c.get("mtp_layers_block_type"):
        return "".join(kinds.get(k, "?") for k in c["mtp_layers_block_type"])
    return "*E"


class MTPStep(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList([AttentionLayer(cfg), MoELayer(cfg)])

    def forward(self, h, e, cache=None):
        """h, e [B, T, H] -> out [B, T, H] (after final_layernorm). With a cache, the positions
        follow those already in it."""
        a, m = self.layers
        x = a.eh_proj(torch.cat([a.enorm(e), a.hnorm(h)], -1).to(a.eh_proj.weight.dtype))
        x = x + a.mixer(a.norm(x).to(x.dtype), cache)
        x = x + m.mixer(m.norm(x).to(x.dtype))
        return m.final_layernorm(x)

    def tensors(self):
        """The checkpoint's mtp.* tensors (the module's own dtype)."""
        return {PREFIX + k: v.detach() for k, v in self.state_dict().items()}

    def load_tensors(self, tensors):
        """Loads the mtp.* entries of a checkpoint's tensors; every name must be there, no more."""
        own = {k[len(PREFIX):]: v for k, v in tensors.items() if k.startswith(PREFIX)}
        self.load_state_dict(own, strict=True)


def draft_logits(out, lm_head):
    return F.linear(out.float(), lm_head.float())
