#!/usr/bin/env python3
"""mtp_reference.py - reference outputs of a checkpoint's MTP step, for the engine's MTP tests.

Runs on the GPU machine's CPU (transformers 5.17, torch 2.11, safetensors; float32 arithmetic on
the stored, rounded weights). The main model's hidden states come from transformers with the dt
floor removed (MODEL.md 3.3.6: mixer.time_step_limit = (0, inf)); the MTP step is
tools/reference/mtp.py, written from MODEL.md 3.8 (transformers has no MTP).

    python3 tools/reference/mtp_reference.py MODEL_DIR OUTDIR [--ids FILE.i32] [--n 33] [--chain 8]

Writes into OUTDIR (all little-endian):
    mtp_ids.i32           int32[n]            the input ids: --ids' first n, else the model's
                                              tokenizer on TEXT (first n), else seeded random ids
    mtp_logits.f32        float32[n-1][V]     teacher-forced MTP logits at t = 0..n-2: h = the main
                                              model's hidden state at t (after norm_f), e = E_emb[ids[t+1]];
                                              one causal MTP pass over the n-1 positions
    mtp_chain.i32         int32[1+chain]      g = argmax of the main model's logits at n-1, then the
                                              chain's drafts d1..d_chain
    mtp_chain_logits.f32  float32[chain][V]   chain step j (MTP position n-1+j): step 0 takes h_{n-1}
                                              and token g, step j > 0 takes the previous step's output
                                              (after final_layernorm) and token d_j; d_{j+1} = argmax of
                                              step j's logits (lowest index among equals); the MTP
                                              attention sees positions 0..n-2 of the teacher-forced
                                              pass, then the chain's
    mtp_reference.json    what the files are, the sizes, the checkpoint's sha256, self-checks
"""
import argparse, hashlib, json, os, sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mtp import KVCache, MTPConfig, MTPStep, draft_logits, mtp_pattern  # noqa: E402

# Revelation 21:1-2: the end of the text is the demo's held-out part (tools/train_demo.py)
TEXT = ("And I saw a new heaven and a new earth: for the first heaven and the first earth were "
        "passed away; and there was no more sea. And I John saw the holy city, new Jerusalem, "
        "coming down from God out of heaven, prepared as a bride adorned for her husband.")
SELF_CHECK_TOL = 1e-5    # the incremental and the one-pass MTP evaluations differ only in summation order:
                         # relative to the logits' size, as FLOAT64_TOL (the demo's reach 12, and a
                         # difference of 1.05e-5 absolute there is 9e-7 of them)
FLOAT64_TOL = 1e-5       # float32 rounding against float64, relative to the logits' size (a routing
                         # choice that flips between the two shows as a far larger difference)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_tensors(model_dir):
    """Every tensor of the checkpoint (one file or an index of shards), as stored."""
    from safetensors.torch import load_file
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        files = sorted(set(json.load(open(index))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for name in files:
        tensors.update(load_file(os.path.join(model_dir, name)))
    return tensors


def shared_matrices(tensors):
    """(embedding, lm_head) in float32: the MTP step uses the main model's."""
    emb = tensors.get("backbone.embeddings.weight", tensors.get("backbone.embedding.weight"))
    if emb is None:
        sys.exit("no backbone.embeddings.weight in the checkpoint")
    head = tensors.get("lm_head.weight", emb)                # a tied checkpoint has no lm_head
    return emb.float(), head.float()


def input_ids(args, model_dir, vocab):
    if args.ids:
        ids = np.fromfile(args.ids, dtype="<i4").astype(np.int64)
        source = args.ids
    elif os.path.exists(os.path.join(model_dir, "tokenizer.json")):
        from tokenizers import Tokenizer
        ids = np.array(Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
                       .encode(TEXT, add_special_tokens=False).ids, dtype=np.int64)
        source = "tokenizer.json on TEXT: " + TEXT
    else:
        ids = torch.randint(0, vocab, (args.n,), generator=torch.Generator().manual_seed(args.seed)).numpy()
        source = f"random, torch.Generator seed {args.seed}"
    if len(ids) < args.n:
        sys.exit(f"only {len(ids)} input ids ({source}); --n is {args.n}")
    ids = ids[:args.n]
    if ids.min() < 0 or ids.max() >= vocab:
        sys.exit(f"input ids outside the vocabulary of {vocab} ({source})")
    return torch.from_numpy(ids), source


def final_hidden_states(model, ids):
    """transformers' forward of ids [B, T] -> (the hidden states its lm_head reads [B, T, H], i.e.
    after norm_f (MODEL.md 3.1, 3.7), caught at the lm_head's input; the logits [B, T, V];
    whether output_hidden_states' last entry is that same state bit for bit, as MODEL.md 3.1 found)."""
    seen = []
    hook = model.lm_head.register_forward_hook(lambda module, inputs, output: seen.append(inputs[0]))
    try:
        out = model(ids, output_hidden_states=True, use_cache=False)
    finally:
        hook.remove()
    if len(seen) != 1 or tuple(seen[0].shape[:2]) != tuple(ids.shape):
        raise RuntimeError(f"lm_head ran {len(seen)} times on "
                           f"{[tuple(x.shape) for x in seen]} for ids {tuple(ids.shape)}")
    return seen[0].float(), out.logits.float(), bool(torch.equal(out.hidden_states[-1], seen[0]))


@torch.no_grad()
def main_hidden(model_dir, ids):
    """transformers' float32 forward without the dt floor: the hidden state after norm_f at every
    position [n, H], the logits [n, V], and whether output_hidden_states[-1] equals it."""
    from transformers import NemotronHForCausalLM
    model = NemotronHForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    for m in model.modules():
        if hasattr(m, "A_log") and hasattr(m, "time_step_limit"):
            m.time_step_limit = (0.0, float("inf"))
    h, logits, same = final_hidden_states(model, ids[None])
    return h[0], logits[0], same


def float64_positions(c, w, hs, es, lm_head):
    """A second evaluation, one position at a time in float64 numpy straight from MODEL.md 3.8
    (no shared code with mtp.py): the logits [T, V] of the MTP positions 0..T-1 whose inputs are
    hs, es [T, H], and each position's routing margin (k-th minus (k+1)-th biased score)."""
    w = {k[len("mtp."):]: v.double().numpy() for k, v in w.items() if k.startswith("mtp.")}
    norm = lambda x, g: g * x / np.sqrt(np.mean(x * x) + c.eps)
    relu2 = lambda x: np.maximum(x, 0) ** 2
    expert = lambda p, x: w[p + "down_proj.weight"] @ relu2(w[p + "up_proj.weight"] @ x)
    rep, keys, values, logits, margins = c.n_heads // c.n_kv_heads, [], [], [], []
    for h, e in zip(hs.double().numpy(), es.double().numpy()):
        x = w["layers.0.eh_proj.weight"] @ np.concatenate([norm(e, w["layers.0.enorm.weight"]),
                                                           norm(h, w["layers.0.hnorm.weight"])])
        a = norm(x, w["layers.0.norm.weight"])
        q = (w["layers.0.mixer.q_proj.weight"] @ a).reshape(c.n_heads, c.head_dim)
        keys.append((w["layers.0.mixer.k_proj.weight"] @ a).reshape(c.n_kv_heads, c.head_dim))
        values.append((w["layers.0.mixer.v_proj.weight"] @ a).reshape(c.n_kv_heads, c.head_dim))
        o = np.zeros((c.n_heads, c.head_dim))
        for j in range(c.n_heads):
            s = np.array([q[j] @ k[j // rep] for k in keys]) / np.sqrt(c.head_dim)
            p = np.exp(s - s.max())
            o[j] = sum(pi * v[j // rep] for pi, v in zip(p / p.sum(), values))
        x = x + w["layers.0.mixer.o_proj.weight"] @ o.reshape(-1)
        m = norm(x, w["layers.1.norm.weight"])
        score = 1 / (1 + np.exp(-(w["layers.1.mixer.gate.weight"] @ m)))
        biased = score + w["layers.1.mixer.gate.e_score_correction_bias"]
        if c.n_group > 1:
            groups = biased.reshape(c.n_group, -1)
            top2 = np.sort(groups, axis=1)[:, -2:].sum(1)
            dropped = np.argsort(-top2, kind="stable")[c.topk_group:]
            groups = groups.copy()
            groups[dropped] = -np.inf
            biased = groups.reshape(-1)
        order = np.argsort(-biased, kind="stable")
        chosen = order[:c.top_k]
        margins.append(float(biased[order[c.top_k - 1]] - biased[order[c.top_k]]))
        gate = score[chosen]
        if c.norm_topk_prob:
            gate = gate / (gate.sum() + 1e-20)
        gate = gate * c.routed_scaling_factor
        inner = w["layers.1.mixer.fc1_latent_proj.weight"] @ m if c.latent else m
        y = sum(g * expert(f"layers.1.mixer.experts.{j}.", inner) for g, j in zip(gate, chosen))
        if c.latent:
            y = w["layers.1.mixer.fc2_latent_proj.weight"] @ y
        x = x + y + expert("layers.1.mixer.shared_experts.", m)
        logits.append(lm_head @ norm(x, w["layers.1.final_layernorm.weight"]))
    return np.array(logits), np.array(margins)


@torch.no_grad()
def mtp_outputs(mtp, h, logits_main, ids, emb, head, chain):
    """The teacher-forced pass, the chain, and the self-checks (module docstring)."""
    n = ids.shape[0]
    cache = KVCache()
    out_tf = mtp(h[None, :n - 1], emb[ids[1:]][None], cache)[0]             # [n-1, H]
    logits_tf = draft_logits(out_tf, head)
    g = int(logits_main[n - 1].argmax())
    tokens, chain_logits, chain_h, chain_e = [g], [], [h[n - 1]], []
    prev = h[n - 1]
    for _ in range(chain):
        e = emb[tokens[-1]]
        chain_e.append(e)
        out = mtp(prev[None, None], e[None, None], cache)[0, 0]
        step = draft_logits(out, head)
        chain_logits.append(step)
        tokens.append(int(step.argmax()))                    # torch: the first of equal maxima
        prev = out
        chain_h.append(out)
    chain_logits = torch.stack(chain_logits) if chain else torch.zeros(0, head.shape[0])

    # self-check 1: one position at a time through the cache = the one causal pass
    inc_cache, inc = KVCache(), []
    for t in range(n - 1):
        inc.append(draft_logits(mtp(h[None, t:t + 1], emb[ids[t + 1:t + 2]][None], inc_cache)[0], head)[0])
    inc = torch.stack(inc)
    # self-check 2: the chain's inputs in one causal pass with the teacher-forced ones = the chain
    all_h = torch.cat([h[:n - 1], torch.stack(chain_h[:chain])]) if chain else h[:n - 1]
    all_e = torch.cat([emb[ids[1:]], torch.stack(chain_e)]) if chain else emb[ids[1:]]
    one = draft_logits(mtp(all_h[None], all_e[None])[0], head)
    # self-check 3: the float64 position-by-position evaluation of the same inputs
    f64, margins = float64_positions(mtp.cfg, mtp.tensors(), all_h, all_e, head.double().numpy())
    ours = torch.cat([logits_tf, chain_logits]).double().numpy()
    top2 = chain_logits.topk(2, dim=-1).values if chain else torch.zeros(0, 2)
    checks = {
        "incremental_vs_one_pass_max_abs": float((inc - logits_tf).abs().max()),
        "chain_in_one_pass_vs_cached_max_abs":
            float((one[n - 1:] - chain_logits).abs().max()) if chain else 0.0,
        "teacher_forced_in_longer_pass_max_abs": float((one[:n - 1] - logits_tf).abs().max()),
        "float64_loop_vs_float32_max_abs": float(np.abs(f64 - ours).max()),
        "float64_min_routing_margin": float(margins.min()),
        "chain_min_top2_gap": float((top2[:, 0] - top2[:, 1]).min()) if chain else None,
    }
    return logits_tf, torch.tensor(tokens, dtype=torch.int32), chain_logits, checks


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir"), ap.add_argument("outdir")
    ap.add_argument("--ids", metavar="FILE.i32", help="int32 little-endian input ids (first --n used)")
    ap.add_argument("--n", type=int, default=33, help="input length (default 33)")
    ap.add_argument("--chain", type=int, default=8, help="chained drafts (default 8)")
    ap.add_argument("--seed", type=int, default=1234, help="for random ids (no tokenizer, no --ids)")
    args = ap.parse_args()
    torch.set_num_threads(8)
    if args.n < 2 or args.chain < 0:
        ap.error("--n must be at least 2 and --chain at least 0")
    config = json.load(open(os.path.join(args.model_dir, "config.json")))
    if config.get("num_nextn_predict_layers", 0) != 1 or mtp_pattern(config) != "*E":
        sys.exit(f"{args.model_dir}: needs num_nextn_predict_layers 1 and MTP pattern *E "
                 f"(has {config.get('num_nextn_predict_layers', 0)}, {mtp_pattern(config)!r})")
    tensors = load_tensors(args.model_dir)
    emb, head = shared_matrices(tensors)
    mtp = MTPStep(MTPConfig(config)).float().eval()
    mtp.load_tensors(tensors)                                # f32 copies of the stored values
    ids, source = input_ids(args, args.model_dir, emb.shape[0])
    h, logits_main, head_equal = main_hidden(args.model_dir, ids)
    logits_tf, chain_ids, chain_logits, checks = mtp_outputs(mtp, h, logits_main, ids, emb, head, args.chain)
    meta_max_abs = float(max(logits_tf.abs().max(), chain_logits.abs().max() if args.chain else 0))
    checks["output_hidden_states_last_is_lm_head_input"] = head_equal   # informational
    if not head_equal:
        print("note: output_hidden_states[-1] differs from the lm_head's input; the reference uses "
              "the lm_head's input (the state after norm_f)", flush=True)
    scale = max(1.0, meta_max_abs)
    ok = (checks["incremental_vs_one_pass_max_abs"] <= SELF_CHECK_TOL * scale
          and checks["chain_in_one_pass_vs_cached_max_abs"] <= SELF_CHECK_TOL * scale
          and checks["teacher_forced_in_longer_pass_max_abs"] <= SELF_CHECK_TOL * scale
          and checks["float64_loop_vs_float32_max_abs"] <= FLOAT64_TOL * scale)

    os.makedirs(args.outdir, exist_ok=True)
    path = lambda name: os.path.join(args.outdir, name)
    ids.numpy().astype("<i4").tofile(path("mtp_ids.i32"))
    logits_tf.numpy().astype("<f4").tofile(path("mtp_logits.f32"))
    chain_ids.numpy().astype("<i4").tofile(path("mtp_chain.i32"))
    chain_logits.numpy().astype("<f4").tofile(path("mtp_chain_logits.f32"))
    n, V = args.n, emb.shape[0]
    meta = {
        "model_dir": os.path.basename(os.path.normpath(args.model_dir)),
        "model_safetensors_sha256": sha256(os.path.join(args.model_dir, "model.safetensors"))
        if os.path.exists(os.path.join(args.model_dir, "model.safetensors")) else None,
        "n": n, "vocab": V, "chain": args.chain, "ids_source": source,
        "files": {"mtp_ids.i32": "int32[n] input ids",
                  "mtp_logits.f32": "float32[n-1][vocab] teacher-forced MTP logits, t = 0..n-2 "
                                    "(h_t after norm_f, e = E_emb[ids[t+1]])",
                  "mtp_chain.i32": "int32[1+chain]: argmax of the main logits at n-1, then drafts d1..d_chain",
                  "mtp_chain_logits.f32": "float32[chain][vocab]: chain step j at MTP position n-1+j "
                                          "(step 0: h_{n-1}, token g; step j: previous step's output, token d_j)"},
        "main_greedy_next": int(chain_ids[0]), "chain_drafts": chain_ids[1:].tolist(),
        "teacher_forced_argmax": logits_tf.argmax(-1).tolist(),
        "max_abs_logit": meta_max_abs,
        "hidden_state": "the main model's lm_head input (after norm_f), caught by a forward hook",
        "self_checks": checks, "self_check_tolerance": SELF_CHECK_TOL, "self_checks_pass": ok,
        "arithmetic": "float32 on the stored weights, CPU; main model: transformers, no dt floor",
        "transformers": __import__("transformers").__version__, "torch": torch.__version__,
    }
    json.dump(meta, open(path("mtp_reference.json"), "w"), indent=1)
    print(f"{args.model_dir}: n {n}, chain {args.chain}: g {int(chain_ids[0])}, drafts {chain_ids[1:].tolist()}; "
          f"max |logit| {meta['max_abs_logit']:.3g}; self-checks {checks}", flush=True)
    print(f"{'PASS' if ok else 'FAIL'} mtp_reference {args.model_dir}: self-checks", flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
