#!/usr/bin/env python3
"""make_fixtures.py - tiny random Nemotron-H checkpoints and transformers reference outputs.

Runs on the GPU machine (transformers 5.17, torch 2.11; CPU arithmetic in float32, so the
result does not depend on TF32 or GPU kernels). For each fixture model it:

  1. builds a NemotronHForCausalLM from a small config that covers the block kinds the
     fixture is about, and re-draws EVERY parameter and buffer (no constant norms, no zero
     router bias, D != 1, one head whose dt sits below time_step_min);
  2. casts it to the fixture's storage dtype (f32, bf16 or f16) and saves it with
     save_pretrained (hub names: backbone.*, one tensor per expert), then edits the saved
     files where the fixture is about a file form (tied lm_head removed, MTP tensors
     appended, config written with hybrid_override_pattern or legacy names);
  3. runs the model in float32 on the rounded weights with the dt floor removed
     (MODEL.md 3.3.6 / 6: mixer.time_step_limit = (0, inf)), and writes
        ids.i32            int32[seq]            random input ids
        logits.f32         float32[seq][vocab]   one full forward, every position
        greedy_ids.i32     int32[prompt+gen]     prompt then greedy continuation (cached loop)
        greedy_logits.f32  float32[gen][vocab]   the logits each greedy token was chosen from
        fixture.json       what the files are, the config, and self-checks
All multi-byte values little-endian.

usage: python3 make_fixtures.py OUTDIR        (writes OUTDIR/<fixture>/...)
"""
import json, math, os, sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import NemotronHConfig, NemotronHForCausalLM

torch.set_num_threads(8)

BASE = dict(
    vocab_size=384, hidden_size=64,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=96,
    mamba_num_heads=8, mamba_head_dim=8, n_groups=2, ssm_state_size=16, conv_kernel=4,
    use_conv_bias=True, use_bias=False, mlp_bias=False,
    n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
    moe_shared_expert_intermediate_size=48, n_shared_experts=1,
    n_group=1, topk_group=1, norm_topk_prob=True, routed_scaling_factor=2.5,
    moe_latent_size=None, layer_norm_epsilon=1e-5, time_step_min=0.001, time_step_max=0.1,
    mlp_hidden_act="relu2", mamba_hidden_act="silu", tie_word_embeddings=False,
    use_mamba_kernels=False)

# name -> (config overrides, pattern, storage dtype, seq, chunk, file edits)
FIXTURES = {
    # every block kind, group-limited routing, three real-size SSD chunks, sharded files
    "hybrid-group-f32": (dict(n_group=4, topk_group=2, chunk_size=128), "M*-EMEM*E-M",
                         torch.float32, 300, dict(shard="120KB")),
    # LatentMoE (fc1/fc2 latent projections), more experts, top-4, MTP tensors in the file
    "latent-mtp-f32": (dict(moe_latent_size=24, n_routed_experts=16, num_experts_per_tok=4,
                            routed_scaling_factor=5.0, chunk_size=48, num_nextn_predict_layers=1),
                       "ME*EMEM-", torch.float32, 130, dict(mtp=True)),
    # bf16 storage, tied embeddings (no lm_head in the file), config with the pattern string
    "tied-bf16": (dict(n_group=2, topk_group=1, chunk_size=64, tie_word_embeddings=True,
                       norm_topk_prob=False, routed_scaling_factor=1.0),
                  "MEM*E-ME", torch.bfloat16, 130, dict(tie=True, pattern_string=True)),
    # dense Nemotron-H style (no MoE), f16 storage, legacy layer names, bare Infinity
    "dense-f16": (dict(mamba_num_heads=8, mamba_head_dim=16, n_groups=4, ssm_state_size=8,
                       chunk_size=64, intermediate_size=80),
                  "M-M*-M-M", torch.float16, 130, dict(legacy_names=True)),
}
PROMPT, GEN = 12, 40
KIND = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
NEW = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}


def randomise(model, g):
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            shape = p.shape
            if name.endswith("A_log"):
                v = torch.log(1 + 15 * torch.rand(shape, generator=g))
            elif name.endswith(".D"):
                v = 1 + 0.2 * torch.randn(shape, generator=g)
            elif name.endswith("dt_bias"):
                dt = torch.exp(torch.rand(shape, generator=g) * math.log(100) + math.log(1e-3))
                v = dt + torch.log(-torch.expm1(-dt))
                v[0] = -8.0                      # one head far below the 1e-3 floor
            elif name.endswith("e_score_correction_bias"):
                v = 0.1 * torch.randn(shape, generator=g)
            elif name.endswith("norm.weight") or name.endswith("norm_f.weight"):
                v = 1 + 0.1 * torch.randn(shape, generator=g)
            elif name.endswith("conv1d.weight"):
                v = 0.5 * torch.randn(shape, generator=g)
            elif name.endswith(".bias"):
                v = 0.1 * torch.randn(shape, generator=g)
            elif name.endswith("embeddings.weight"):
                v = torch.randn(shape, generator=g)
            else:
                v = torch.randn(shape, generator=g) / math.sqrt(shape[-1])
            p.copy_(v.to(p.dtype))


def mtp_tensors(cfg, dtype, g):
    """One MTP step of pattern '*E' in vLLM's names (MODEL.md 2.4); HF ignores them."""
    H, nq, nkv, d = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    E, mi, si = cfg["n_routed_experts"], cfg["moe_intermediate_size"], cfg["moe_shared_expert_intermediate_size"]
    L = cfg["moe_latent_size"] or H
    r = lambda *s: (torch.randn(s, generator=g) / math.sqrt(s[-1])).to(dtype)
    t = {"mtp.layers.0.enorm.weight": r(H), "mtp.layers.0.hnorm.weight": r(H),
         "mtp.layers.0.eh_proj.weight": r(H, 2 * H), "mtp.layers.0.norm.weight": r(H),
         "mtp.layers.0.mixer.q_proj.weight": r(nq * d, H), "mtp.layers.0.mixer.k_proj.weight": r(nkv * d, H),
         "mtp.layers.0.mixer.v_proj.weight": r(nkv * d, H), "mtp.layers.0.mixer.o_proj.weight": r(H, nq * d),
         "mtp.layers.1.norm.weight": r(H), "mtp.layers.1.mixer.gate.weight": r(E, H),
         "mtp.layers.1.mixer.gate.e_score_correction_bias": r(E).float(),
         "mtp.layers.1.mixer.shared_experts.up_proj.weight": r(si, H),
         "mtp.layers.1.mixer.shared_experts.down_proj.weight": r(H, si),
         "mtp.layers.1.final_layernorm.weight": r(H)}
    for j in range(E):
        t[f"mtp.layers.1.mixer.experts.{j}.up_proj.weight"] = r(mi, L)
        t[f"mtp.layers.1.mixer.experts.{j}.down_proj.weight"] = r(L, mi)
    if cfg["moe_latent_size"]:
        t["mtp.layers.1.mixer.fc1_latent_proj.weight"] = r(L, H)
        t["mtp.layers.1.mixer.fc2_latent_proj.weight"] = r(H, L)
    return t


@torch.no_grad()
def reference(model, ids):
    full = model(ids[None], use_cache=False).logits[0].float()
    out = model(ids[None, :PROMPT], use_cache=True)          # prompt: chunked path
    cache, seq, steps = out.past_key_values, ids[:PROMPT].tolist(), []
    for _ in range(GEN):
        last = out.logits[0, -1].float()
        steps.append(last)
        nxt = int(last.argmax())
        seq.append(nxt)
        out = model(torch.tensor([[nxt]]), past_key_values=cache, use_cache=True)
        cache = out.past_key_values
    # self-check: a token-by-token decode of the same ids agrees with the full forward
    out = model(ids[None, :1], use_cache=True)
    cache, dec = out.past_key_values, [out.logits[0, -1].float()]
    for t in range(1, ids.shape[0]):
        out = model(ids[None, t:t + 1], past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        dec.append(out.logits[0, -1].float())
    dec = torch.stack(dec)
    rel = float(((full - dec).norm(dim=1) / full.norm(dim=1)).max())
    return full, torch.tensor(seq, dtype=torch.int32), torch.stack(steps), rel


def build(outroot, name, over, pattern, dtype, seq, edits, seed):
    cfg = dict(BASE, **over)
    cfg["layers_block_type"] = [NEW[c] for c in pattern]
    model = NemotronHForCausalLM(NemotronHConfig(**cfg)).eval()
    g = torch.Generator().manual_seed(seed)
    randomise(model, g)
    if edits.get("tie"):
        with torch.no_grad():                         # HF never ties (MODEL.md 1.2): copy, drop later
            model.lm_head.weight.copy_(model.get_input_embeddings().weight)
    model = model.to(dtype)
    out = os.path.join(outroot, name)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, max_shard_size=edits.get("shard", "50GB"))

    st = os.path.join(out, "model.safetensors")
    if edits.get("tie") or edits.get("mtp"):
        w = load_file(st)
        if edits.get("tie"):
            w.pop("lm_head.weight", None)
        if edits.get("mtp"):
            w.update(mtp_tensors(cfg, dtype, g))
        save_file(w, st, metadata={"format": "pt"})
    cpath = os.path.join(out, "config.json")
    c = json.load(open(cpath))
    if edits.get("pattern_string"):
        del c["layers_block_type"]
        c["hybrid_override_pattern"] = pattern
        c["time_step_limit"] = [0.0, 1e30]
    if edits.get("legacy_names"):
        c["layers_block_type"] = [KIND[ch] for ch in pattern]
        c["time_step_limit"] = [0.0, float("inf")]   # json writes a bare Infinity
    json.dump(c, open(cpath, "w"), indent=2)

    model = model.float()                             # f32 arithmetic on the stored values
    for m in model.modules():                         # no dt floor anywhere (MODEL.md 3.3.6)
        if hasattr(m, "A_log") and hasattr(m, "time_step_limit"):
            m.time_step_limit = (0.0, float("inf"))
    ids = torch.randint(0, cfg["vocab_size"], (seq,), generator=g)
    full, gids, glog, rel = reference(model, ids)
    np.asarray(ids, dtype="<i4").tofile(os.path.join(out, "ids.i32"))
    full.numpy().astype("<f4").tofile(os.path.join(out, "logits.f32"))
    gids.numpy().astype("<i4").tofile(os.path.join(out, "greedy_ids.i32"))
    glog.numpy().astype("<f4").tofile(os.path.join(out, "greedy_logits.f32"))
    meta = dict(fixture=name, pattern=pattern, storage_dtype=str(dtype).replace("torch.", ""),
                seq=seq, vocab=cfg["vocab_size"], prompt=PROMPT, generated=GEN,
                files={"ids.i32": "int32[seq]", "logits.f32": "float32[seq][vocab] full forward",
                       "greedy_ids.i32": "int32[prompt+generated]",
                       "greedy_logits.f32": "float32[generated][vocab]"},
                full_vs_decode_max_rel=rel, transformers=__import__("transformers").__version__,
                torch=torch.__version__, seed=seed)
    json.dump(meta, open(os.path.join(out, "fixture.json"), "w"), indent=1)
    print(f"{name}: seq {seq}, full vs token-by-token decode max rel {rel:.2e}, "
          f"files {sorted(os.listdir(out))}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for i, (name, (over, pattern, dtype, seq, edits)) in enumerate(FIXTURES.items()):
        build(sys.argv[1], name, over, pattern, dtype, seq, edits, seed=1000 + i)
