#!/usr/bin/env python3
"""train_demo.py - trains the small Nemotron-H that ships with nemotron.c (models/nemotron-h-kjv).

Runs on the GPU machine (transformers 5.17, torch 2.11, tokenizers 0.23). The text is the King
James Bible as Debian's bible-kjv package prints it (public domain text):

    apt-get install bible-kjv && bible "Gen1:1-Rev22:21" > kjv.txt
    python3 tools/train_demo.py kjv.txt OUTDIR [--steps 1500]

It trains a byte-level BPE tokenizer of the Nemotron-3 kind (the pre-tokenizer and special tokens
of tools/reference/make_tokenizer_fixtures.py, 4096 tokens), then a NemotronHForCausalLM with
every block kind (Mamba-2, attention, dense MLP, MoE with a shared expert; 8 layers, 8 routed
experts top-2) with the dt floor removed everywhere (MODEL.md 3.3.6: trained as served), and
balances the experts without an auxiliary loss (the router's correction bias is nudged towards
even load after every step, as DeepSeek-V3 does; Nemotron checkpoints carry that bias).
It trains for --steps and keeps the checkpoint with the lowest held-out loss (the 1 M-token text
is memorised after a few epochs). Writes OUTDIR/model (bf16 save_pretrained + tokenizer.json),
OUTDIR/reference (transformers' greedy continuations and logits, float32 arithmetic on the bf16
weights, no dt floor) and OUTDIR/train_log.json (losses, perplexity, expert routing counts;
tools/plot_demo.py draws them).

    python3 tools/train_demo.py kjv.txt OUTDIR --draft --tokenizer models/nemotron-h-kjv/tokenizer.json

--draft trains the demo's draft model for speculative decoding instead (DRAFT_PATTERN, about
2.4 M parameters with the embeddings and the lm_head, under 6 MB in bf16): a Nemotron-H of
Mamba-2, one attention layer and one dense MLP, with the same loop, dt floor handling and
checkpoint choice, on the same text split. It never trains a tokenizer: it loads the demo's
tokenizer.json, so its token ids are the demo's, and copies that file (and the demo's
tokenizer_config.json and generation_config.json beside it) into OUTDIR/model unchanged.

    python3 tools/train_demo.py kjv.txt OUTDIR --mtp models/nemotron-h-kjv [--minutes 3]

--mtp gives a trained model one multi-token-prediction step (MTP pattern "*E": an attention and an
MoE block, MODEL.md 2.4 / 3.8; tools/reference/mtp.py) and trains only that: the model is
loaded frozen with the dt floor removed, its hidden states (after norm_f) are computed once for
the same text split, and the MTP step learns to predict token t+2 from the hidden state at t and
token t+1 (cross-entropy through the model's own lm_head; the router's correction bias balanced
as above). It keeps the best held-out checkpoint and writes OUTDIR/model: a copy of the model
directory whose model.safetensors holds every original tensor unchanged plus the mtp.* tensors
(in the model's dtype, the correction bias F32), and whose config.json adds
num_nextn_predict_layers 1 and mtp_hybrid_override_pattern "*E". It then checks that
transformers loads that directory with the same logits, and reports the held-out MTP loss and
how often the MTP's greedy draft equals the model's own greedy next token (the acceptance rate
speculative decoding would see, teacher forced), in OUTDIR/train_log.json.
"""
import argparse, json, math, os, shutil, sys, time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
import torch.nn.functional as F
from transformers import NemotronHConfig, NemotronHForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
from make_tokenizer_fixtures import build as build_tokenizer  # noqa: E402
from mtp import MTPConfig, MTPStep, draft_logits  # noqa: E402
from mtp_reference import final_hidden_states  # noqa: E402

PROMPTS = ["In the beginning", "And the LORD said unto Moses,", "Blessed are the",
           "The LORD is my shepherd;", "And it came to pass, when"]
# at least 64 tokens; the reference keeps the first 64
LOGITS_TEXT = ("And God said, Let the waters under the heaven be gathered together unto one "
               "place, and let the dry land appear: and it was so. And God called the dry land "
               "Earth; and the gathering together of the waters called he Seas: and God saw that "
               "it was good. And God said, Let the earth bring forth grass, the herb yielding "
               "seed, and the fruit tree yielding fruit after his kind, whose seed is in itself.")


def kjv_prose(path):
    """The bible tool's output -> one verse per line, verse numbers and headings dropped.
    Its layout: a heading ("Genesis 1") after a blank line, verses as "  N text", and a verse's
    wrapped lines starting at column 0 right after it."""
    verses, cur, after_blank = [], None, True
    for line in open(path, encoding="utf-8"):
        s = line.rstrip("\n")
        if not s.strip():
            after_blank = True
            continue
        head = s.lstrip()
        num = head.split(" ", 1)[0]
        if s.startswith(" ") and num.isdigit():            # "  12 And ..." starts a verse
            if cur is not None:
                verses.append(cur)
            cur = head[len(num):].strip()
        elif not after_blank and cur is not None:           # a wrapped verse line
            cur += " " + s.strip()
        after_blank = False                                 # (else: a heading, dropped)
    if cur is not None:
        verses.append(cur)
    return "\n".join(verses) + "\n"


CONFIG = dict(
    vocab_size=4096, hidden_size=256, layers_block_type=None,    # set below from PATTERN
    num_attention_heads=4, num_key_value_heads=2, head_dim=64, intermediate_size=768,
    mamba_num_heads=8, mamba_head_dim=32, n_groups=2, ssm_state_size=32, conv_kernel=4,
    chunk_size=128, use_conv_bias=True, use_bias=False, mlp_bias=False,
    n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=256,
    moe_shared_expert_intermediate_size=512, n_shared_experts=1, n_group=1, topk_group=1,
    norm_topk_prob=True, routed_scaling_factor=2.5, layer_norm_epsilon=1e-5,
    time_step_min=0.001, time_step_max=0.1, mlp_hidden_act="relu2", mamba_hidden_act="silu",
    tie_word_embeddings=False, use_mamba_kernels=False, bos_token_id=1, eos_token_id=2,
    pad_token_id=0, max_position_embeddings=4096)
PATTERN = "MEM*EM-E"
NEW = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}

# The draft model: the vocabulary is the demo's, so the embeddings and the lm_head (2 x 4096 x
# hidden) are most of the parameters; hidden 192 leaves room for three Mamba-2 layers, one
# attention layer and a dense MLP inside 3 M. The Mamba heads stay the demo's (32 wide, state
# 32, 2 groups; 6 of them span hidden); attention keeps 4 query and 2 key/value heads, 48 wide
# so that the query width equals hidden.
# The MoE keys keep the demo's values although no layer is MoE: the engine checks them
# against the default MTP pattern ("*E") of config.json.
DRAFT_CONFIG = dict(CONFIG, hidden_size=192, mamba_num_heads=6, head_dim=48,
                    intermediate_size=768)
DRAFT_PATTERN = "MM*M-"
DRAFT_MAX_PARAMS = 3_000_000
DRAFT_MAX_BF16_BYTES = 6_000_000


def no_dt_floor(model):
    for m in model.modules():
        if hasattr(m, "A_log") and hasattr(m, "time_step_limit"):
            m.time_step_limit = (0.0, float("inf"))


def train_step(loss, params, opt, sched, meter):
    """One optimizer step (gradients clipped at 1), then the routers' aux-loss-free balancing:
    each correction bias nudged towards even load by the counts since the last step."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    sched.step()
    with torch.no_grad():
        for gate, c in zip(meter.gates, meter.take()):
            gate.e_score_correction_bias += 1e-3 * torch.sign(c.mean() - c)


def routers(model):
    return [m for n, m in model.named_modules() if n.endswith("mixer.gate")]


class LoadMeter:
    """Counts, per router, how often each expert is chosen (same rule as the model: top-k of
    sigmoid(x W^T) + correction bias), from the router's input."""

    def __init__(self, model, k):
        self.gates, self.k = routers(model), k
        self.counts = [torch.zeros(g.weight.shape[0], device=g.weight.device) for g in self.gates]
        self.hooks = [g.register_forward_hook(self.hook(i)) for i, g in enumerate(self.gates)]

    def hook(self, i):
        def f(mod, inputs, output):
            x = inputs[0].reshape(-1, mod.weight.shape[1]).float()
            s = torch.sigmoid(x @ mod.weight.float().T) + mod.e_score_correction_bias.float()
            idx = s.topk(self.k, dim=-1).indices.reshape(-1)
            self.counts[i] += torch.bincount(idx, minlength=mod.weight.shape[0]).float()
        return f

    def take(self):
        c = [x.clone() for x in self.counts]
        for x in self.counts:
            x.zero_()
        return c


@torch.no_grad()
def evaluate(model, data, seq, batch, dev, max_batches=40):
    model.eval()
    losses = []
    n = (len(data) - 1) // seq
    for b in range(0, min(n, max_batches * batch), batch):
        rows = torch.stack([data[i * seq:(i + 1) * seq + 1] for i in range(b, min(b + batch, n))]).to(dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(rows[:, :-1], labels=rows[:, :-1], use_cache=False)
        # labels are shifted inside the model: the loss is next-token cross-entropy
        losses.append(float(out.loss))
    model.train()
    return sum(losses) / len(losses)


@torch.no_grad()
def reference(model, tok, outdir):
    """transformers' outputs on the saved bf16 weights, computed in float32 with no dt floor:
    greedy continuations (prompt in one call, then one token per call, as generate() does) and
    a full forward's logits."""
    os.makedirs(outdir, exist_ok=True)
    greedy = []
    for p in PROMPTS:
        ids = tok.encode(p, add_special_tokens=False).ids
        out = model(torch.tensor([ids]), use_cache=True)
        cache, gen = out.past_key_values, []
        for _ in range(32):
            nxt = int(out.logits[0, -1].float().argmax())
            gen.append(nxt)
            out = model(torch.tensor([[nxt]]), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
        greedy.append({"prompt": p, "prompt_ids": ids, "greedy_ids": gen, "greedy_text": tok.decode(gen)})
    ids = tok.encode(LOGITS_TEXT, add_special_tokens=False).ids
    assert len(ids) >= 64, f"LOGITS_TEXT is only {len(ids)} tokens"
    ids = ids[:64]
    logits = model(torch.tensor([ids]), use_cache=False).logits[0].float()
    with open(os.path.join(outdir, "logits.f32"), "wb") as f:
        f.write(logits.numpy().astype("<f4").tobytes())
    json.dump({"greedy": greedy, "logits_ids": ids, "logits_shape": list(logits.shape),
               "logits_file": "logits.f32 float32[len(logits_ids)][vocab] little-endian",
               "transformers": __import__("transformers").__version__, "torch": torch.__version__},
              open(os.path.join(outdir, "reference.json"), "w"), indent=1)
    return greedy


# --mtp: one MTP step on a trained, frozen model
MTP_PATTERN = "*E"


def mtp_rows(data, seq, offsets):
    """Rows of seq + 2 tokens: the model reads seq + 1 of them (hidden states at 0..seq), the MTP
    step at t = 0..seq-1 takes token t+1 and predicts token t+2. One set of rows per offset."""
    rows = []
    for off in offsets:
        for i in range((len(data) - off - 2) // seq):
            rows.append(data[off + i * seq: off + i * seq + seq + 2])
    return torch.stack(rows)


@torch.no_grad()
def frozen_states(model, rows, batch, dev):
    """The frozen model's float32 forward over each row's first seq + 1 tokens: the hidden states
    its lm_head reads (after norm_f) [R, seq+1, H] (kept on dev), its greedy next tokens
    [R, seq+1], and whether output_hidden_states' last entry was that state every time."""
    states, greedy, last_is_head_input = [], [], True
    for b in range(0, len(rows), batch):
        h, logits, same = final_hidden_states(model, rows[b:b + batch, :-1].to(dev))
        last_is_head_input &= same
        states.append(h)
        greedy.append(logits.argmax(-1))
    return torch.cat(states), torch.cat(greedy), last_is_head_input


def mtp_logits(mtp, states, rows, idx, emb, head):
    """The MTP step's logits [B, seq, V] at t = 0..seq-1 of rows idx, and the targets (token t+2)."""
    r = rows[idx]
    return draft_logits(mtp(states[idx, :-1], emb[r[:, 1:-1]]), head), r[:, 2:]


@torch.no_grad()
def evaluate_mtp(mtp, states, rows, greedy, emb, head, batch):
    """Held-out loss of the MTP step, how often its argmax equals the frozen model's greedy token
    at t+1 (the draft speculative decoding would accept) and how often it equals token t+2."""
    mtp.eval()
    loss = accepted = correct = count = 0.0
    for b in range(0, len(rows), batch):
        idx = torch.arange(b, min(b + batch, len(rows)), device=states.device)
        logits, target = mtp_logits(mtp, states, rows, idx, emb, head)
        loss += float(F.cross_entropy(logits.flatten(0, 1), target.flatten(), reduction="sum"))
        draft = logits.argmax(-1)
        accepted += float((draft == greedy[idx, 1:]).sum())
        correct += float((draft == target).sum())
        count += target.numel()
    mtp.train()
    return loss / count, accepted / count, correct / count


def init_mtp(mtp):
    """Norms 1, router bias 0; eh_proj's hidden-state half the identity (the step starts close to
    passing the model's own state through), its embedding half and the rest random with
    1/sqrt(fan_in) scale, and the projections that write into the residual (o_proj, the experts'
    down_proj) 10x smaller so that the attention and MoE blocks start small."""
    H = mtp.cfg.hidden
    with torch.no_grad():
        for name, p in mtp.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape) / math.sqrt(p.shape[-1]))
                if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                    p.mul_(0.1)
        mtp.layers[0].eh_proj.weight[:, H:] = torch.eye(H)
        mtp.layers[1].mixer.gate.e_score_correction_bias.zero_()


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return bool(torch.equal(a.contiguous().view(as_int), b.contiguous().view(as_int)))


def write_mtp_model(src, dst, tensors):
    """dst = a copy of the model directory src with the mtp.* tensors added to model.safetensors
    (every original tensor and the file's metadata unchanged) and config.json naming one MTP step.
    Returns (whether every original tensor reads back bit for bit and the MTP tensors as given,
    the new file's size)."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
    st = os.path.join(src, "model.safetensors")
    if not os.path.exists(st):
        sys.exit(f"{st}: --mtp needs a single-file model")
    shutil.copytree(src, dst, dirs_exist_ok=True)
    original = load_file(st)
    with safe_open(st, framework="pt") as f:
        metadata = f.metadata()
    clash = sorted(set(original) & set(tensors))
    if clash:
        sys.exit(f"{st} already has {clash[0]} (and {len(clash) - 1} more MTP tensors)")
    save_file(dict(original, **tensors), os.path.join(dst, "model.safetensors"), metadata=metadata)
    back = load_file(os.path.join(dst, "model.safetensors"))
    same = (set(back) == set(original) | set(tensors)
            and all(same_bits(back[k], v) for k, v in original.items())
            and all(same_bits(back[k], v) for k, v in tensors.items()))
    config = json.load(open(os.path.join(src, "config.json")))
    config["num_nextn_predict_layers"] = 1
    config["mtp_hybrid_override_pattern"] = MTP_PATTERN
    with open(os.path.join(dst, "config.json"), "w") as f:        # save_pretrained's layout
        f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return same, os.path.getsize(os.path.join(dst, "model.safetensors"))


@torch.no_grad()
def same_logits(src, dst, ids):
    """transformers' float32 logits of the two directories on ids (CPU), bit for bit."""
    logits = []
    for d in (src, dst):
        model = NemotronHForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
        no_dt_floor(model)
        logits.append(model(torch.tensor([ids]), use_cache=False).logits)
    return bool(torch.equal(logits[0], logits[1]))


def train_mtp(args):
    from safetensors.torch import load_file
    from tokenizers import Tokenizer
    torch.manual_seed(args.seed)
    dev = "cuda" if torch.cuda.is_available() else "cpu"   # CPU: only to try the script out
    os.makedirs(args.outdir, exist_ok=True)
    tok = Tokenizer.from_file(os.path.join(args.mtp, "tokenizer.json"))
    text = kjv_prose(args.kjv)
    split = int(len(text) * 0.97)                           # the demo's split: the same held-out text
    enc = lambda s: torch.tensor(tok.encode(s, add_special_tokens=False).ids, dtype=torch.long)
    train, val = enc(text[:split]), enc(text[split:])
    print(f"text {len(text)} chars; tokens train {len(train)} val {len(val)}", flush=True)

    config = json.load(open(os.path.join(args.mtp, "config.json")))
    model = NemotronHForCausalLM.from_pretrained(args.mtp, dtype=torch.float32).to(dev).eval()
    no_dt_floor(model)
    model.requires_grad_(False)
    stored = load_file(os.path.join(args.mtp, "model.safetensors"))
    emb = stored["backbone.embeddings.weight"].float().to(dev)            # shared with the MTP step
    head = stored.get("lm_head.weight", stored["backbone.embeddings.weight"]).float().to(dev)
    t0 = time.time()
    train_rows = mtp_rows(train, args.seq, (0, args.seq // 2))
    val_rows = mtp_rows(val, args.seq, (0,))
    train_states, _, head_ok = frozen_states(model, train_rows, args.batch, dev)
    val_states, val_greedy, head_ok_val = frozen_states(model, val_rows, args.batch, dev)
    head_ok &= head_ok_val
    train_rows, val_rows, val_greedy = train_rows.to(dev), val_rows.to(dev), val_greedy.to(dev)
    print(f"hidden states of {len(train_rows)} + {len(val_rows)} rows of {args.seq + 1} in "
          f"{time.time() - t0:.0f} s", flush=True)
    print(f"{'PASS' if head_ok else 'NOTE: not'} transformers' output_hidden_states[-1] is the frozen "
          f"model's lm_head input, the state after norm_f, bit for bit (the MTP step reads the latter)",
          flush=True)
    del model

    mtp = MTPStep(MTPConfig(config))
    init_mtp(mtp)
    mtp = mtp.to(dev).train()
    nparam = sum(p.numel() for p in mtp.parameters())
    print(f"MTP step {MTP_PATTERN}: {nparam / 1e6:.2f} M parameters", flush=True)
    opt = torch.optim.AdamW(mtp.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    t0 = time.time()
    progress = lambda s: max(min(s, args.steps) / args.steps, (time.time() - t0) / (args.minutes * 60))
    sched = torch.optim.lr_scheduler.LambdaLR(       # the cosine runs out with the steps or the time
        opt, lambda s: min(1.0, (s + 1) / 100) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress(s))))))
    meter = LoadMeter(mtp, config["num_experts_per_tok"])
    g = torch.Generator().manual_seed(args.seed)
    log, best = [], (float("inf"), -1, None)

    def checkpoint(step, loss):
        nonlocal best
        vl, acc, right = evaluate_mtp(mtp, val_states, val_rows, val_greedy, emb, head, args.batch)
        meter.take()                                       # evaluation does not count as load
        log.append({"step": step, "train_loss": loss, "val_loss": vl, "val_acceptance": acc,
                    "val_accuracy": right, "seconds": time.time() - t0})
        print(f"step {step:5d}  train {loss:.3f}  val {vl:.3f}  acceptance {acc:.3f}  "
              f"({time.time() - t0:.0f} s)", flush=True)
        if vl < best[0]:
            best = (vl, step, {k: v.detach().clone() for k, v in mtp.state_dict().items()})

    for step in range(args.steps):
        idx = torch.randint(0, len(train_rows), (args.batch,), generator=g).to(dev)
        logits, target = mtp_logits(mtp, train_states, train_rows, idx, emb, head)
        loss = F.cross_entropy(logits.flatten(0, 1), target.flatten())
        train_step(loss, mtp.parameters(), opt, sched, meter)
        timeout = time.time() - t0 > args.minutes * 60
        if step % args.eval_every == 0 or step == args.steps - 1 or timeout:
            checkpoint(step, float(loss.detach()))
        if timeout:
            print(f"time limit at step {step}", flush=True)
            break
    print(f"best held-out loss {best[0]:.4f} at step {best[1]}: keeping that checkpoint", flush=True)
    mtp.load_state_dict(best[2])
    dtype = stored["backbone.embeddings.weight"].dtype               # the model's storage dtype
    tensors = {k: (v.float() if k.endswith("e_score_correction_bias") else v.to(dtype)).cpu()
               for k, v in mtp.tensors().items()}
    mtp.load_tensors(tensors)                    # evaluate the stored (rounded) values
    final = evaluate_mtp(mtp, val_states, val_rows, val_greedy, emb, head, args.batch)
    routing = [c.tolist() for c in meter.take()]             # the final evaluation's routing
    for hook in meter.hooks:
        hook.remove()
    main_accuracy = float((val_greedy[:, :-1] == val_rows[:, 1:-1]).float().mean())
    print(f"held-out MTP loss {final[0]:.4f} perplexity {math.exp(final[0]):.2f}; greedy draft "
          f"acceptance {final[1]:.4f} (token t+2 right {final[2]:.4f}; the model's own next-token "
          f"accuracy {main_accuracy:.4f}); routing {routing}", flush=True)

    mdir = os.path.join(args.outdir, "model")
    same, size = write_mtp_model(args.mtp, mdir, tensors)
    print(f"{'PASS' if same else 'FAIL'} {mdir}/model.safetensors ({size} bytes): every original "
          f"tensor bit for bit, plus {len(tensors)} mtp.* tensors", flush=True)
    ids = tok.encode(LOGITS_TEXT, add_special_tokens=False).ids[:64]
    equal = same_logits(args.mtp, mdir, ids)
    print(f"{'PASS' if equal else 'FAIL'} transformers loads {mdir} with the original's logits "
          f"({len(ids)} tokens, torch.equal)", flush=True)
    summary = {"mode": "mtp", "model": args.mtp, "mtp_pattern": MTP_PATTERN, "parameters": nparam,
               "steps": log[-1]["step"] + 1, "kept_step": best[1], "seq": args.seq, "batch": args.batch,
               "lr": args.lr, "seed": args.seed, "train_tokens": len(train), "val_tokens": len(val),
               "train_rows": len(train_rows), "val_rows": len(val_rows),
               "epochs": (log[-1]["step"] + 1) * args.batch / len(train_rows),
               "final_val_loss": final[0], "final_val_perplexity": math.exp(final[0]),
               "final_val_acceptance": final[1], "final_val_accuracy_t_plus_2": final[2],
               "model_val_accuracy_t_plus_1": main_accuracy,
               "final_metrics_on": "the stored (rounded) MTP weights, held-out text, teacher forced",
               "routing_counts_mtp_moe": routing, "model_safetensors_bytes": size,
               "checks": {"hidden_state_is_lm_head_input": head_ok, "original_tensors_bit_identical": same,
                          "transformers_logits_equal": equal},
               "log": log}
    json.dump(summary, open(os.path.join(args.outdir, "train_log.json"), "w"), indent=1)
    if not (same and equal):
        sys.exit("a check failed (FAIL above)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kjv"), ap.add_argument("outdir")
    ap.add_argument("--steps", type=int, help="training steps (default 700, --draft 1000, --mtp 100000)")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--minutes", type=float,
                    help="stop training after this long (default 7, --draft 3, --mtp 3)")
    ap.add_argument("--draft", action="store_true",
                    help="train the small draft model (DRAFT_PATTERN) on the --tokenizer given")
    ap.add_argument("--tokenizer", metavar="TOKENIZER_JSON",
                    help="with --draft: the demo's tokenizer.json, used as it is")
    ap.add_argument("--reference-only", metavar="MODEL_DIR",
                    help="skip training: write OUTDIR/reference for a saved model directory")
    ap.add_argument("--mtp", metavar="MODEL_DIR",
                    help="train one MTP step for this saved model (frozen) and write it with the step added")
    args = ap.parse_args()
    if args.mtp and (args.draft or args.tokenizer or args.reference_only):
        ap.error("--mtp trains only the MTP step of the model given: no --draft, --tokenizer or --reference-only")
    if args.draft and not args.tokenizer:
        ap.error("--draft needs --tokenizer (the demo's tokenizer.json): the draft must share its ids")
    if args.tokenizer and not args.draft:
        ap.error("--tokenizer is for --draft; the demo model trains its own tokenizer")
    if args.steps is None:
        args.steps = 100000 if args.mtp else 1000 if args.draft else 700
    if args.minutes is None:
        args.minutes = 3.0 if args.draft or args.mtp else 7.0
    if args.mtp:
        return train_mtp(args)
    config, pattern = (DRAFT_CONFIG, DRAFT_PATTERN) if args.draft else (CONFIG, PATTERN)
    if args.reference_only:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(os.path.join(args.reference_only, "tokenizer.json"))
        model = NemotronHForCausalLM.from_pretrained(args.reference_only, dtype=torch.float32).eval()
        no_dt_floor(model)
        for r in reference(model, tok, os.path.join(args.outdir, "reference")):
            print(repr(r["prompt"]), "->", repr(r["greedy_text"]), flush=True)
        return
    torch.manual_seed(args.seed)
    dev = "cuda"
    os.makedirs(args.outdir, exist_ok=True)
    text = kjv_prose(args.kjv)
    split = int(len(text) * 0.97)
    train_text, val_text = text[:split], text[split:]
    if args.draft:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(args.tokenizer)
        if tok.get_vocab_size() != config["vocab_size"]:
            sys.exit(f"{args.tokenizer}: {tok.get_vocab_size()} tokens, the draft model needs "
                     f"{config['vocab_size']}")
    else:
        train_file = os.path.join(args.outdir, "train.txt")
        open(train_file, "w", encoding="utf-8").write(train_text)
        tok = build_tokenizer(config["vocab_size"], [train_file], [])
        os.unlink(train_file)
        tok.save(os.path.join(args.outdir, "tokenizer.json"))
    enc = lambda s: torch.tensor(tok.encode(s, add_special_tokens=False).ids, dtype=torch.long)
    train, val = enc(train_text), enc(val_text)
    print(f"text {len(text)} chars; tokens train {len(train)} val {len(val)}", flush=True)

    cfg = dict(config, layers_block_type=[NEW[c] for c in pattern])
    model = NemotronHForCausalLM(NemotronHConfig(**cfg)).to(dev)
    no_dt_floor(model)
    with torch.no_grad():                                   # a correction bias that starts at 0
        for g in routers(model):
            g.e_score_correction_bias.zero_()
    nparam = sum(p.numel() for p in model.parameters())
    print(f"model {pattern}: {nparam / 1e6:.2f} M parameters ({nparam}; {2 * nparam} bytes in bf16)",
          flush=True)
    if args.draft and (nparam > DRAFT_MAX_PARAMS or 2 * nparam > DRAFT_MAX_BF16_BYTES):
        sys.exit(f"the draft model has {nparam} parameters: more than {DRAFT_MAX_PARAMS} or "
                 f"{DRAFT_MAX_BF16_BYTES} bytes in bf16")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 100) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps))))
    meter = LoadMeter(model, config["num_experts_per_tok"])
    g = torch.Generator().manual_seed(args.seed)
    log, t0, best = [], time.time(), (float("inf"), -1, None)
    n_rows = (len(train) - 1) // args.seq
    for step in range(args.steps):
        starts = torch.randint(0, len(train) - args.seq - 1, (args.batch,), generator=g)
        rows = torch.stack([train[s:s + args.seq + 1] for s in starts]).to(dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(rows[:, :-1], labels=rows[:, :-1], use_cache=False).loss
        train_step(loss, model.parameters(), opt, sched, meter)
        if step % args.eval_every == 0 or step == args.steps - 1:
            vl = evaluate(model, val, args.seq, args.batch, dev)
            log.append({"step": step, "train_loss": float(loss.detach()), "val_loss": vl, "seconds": time.time() - t0})
            print(f"step {step:5d}  train {float(loss.detach()):.3f}  val {vl:.3f}  ({time.time() - t0:.0f} s)", flush=True)
            if vl < best[0]:                                # keep the best held-out checkpoint:
                best = (vl, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
                # a 1 M-token corpus is memorised after ~5 epochs; past that, val loss rises
        if time.time() - t0 > args.minutes * 60:
            vl = evaluate(model, val, args.seq, args.batch, dev)
            log.append({"step": step, "train_loss": float(loss.detach()), "val_loss": vl, "seconds": time.time() - t0})
            print(f"time limit at step {step}: val {vl:.3f}", flush=True)
            if vl < best[0]:
                best = (vl, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
            break
    print(f"best held-out loss {best[0]:.4f} at step {best[1]}: keeping that checkpoint", flush=True)
    model.load_state_dict(best[2])
    meter.take()
    evaluate(model, val, args.seq, args.batch, dev, max_batches=1000)   # routing on all held-out text
    routing = [c.tolist() for c in meter.take()]
    for h in meter.hooks:
        h.remove()
    final_val = evaluate(model, val, args.seq, args.batch, dev, max_batches=1000)
    summary = {"pattern": pattern, "parameters": nparam, "steps": log[-1]["step"] + 1, "kept_step": best[1],
               "seq": args.seq, "batch": args.batch, "lr": args.lr, "seed": args.seed,
               "train_tokens": len(train), "val_tokens": len(val), "epochs": (log[-1]["step"] + 1) * args.batch / n_rows,
               "final_val_loss": final_val, "final_val_perplexity": math.exp(final_val),
               "routing_counts_per_moe_layer": routing, "log": log}
    if args.draft:
        summary["tokenizer"] = args.tokenizer
    json.dump(summary, open(os.path.join(args.outdir, "train_log.json"), "w"), indent=1)
    print(f"final val loss {final_val:.4f} perplexity {math.exp(final_val):.2f}; routing {routing}", flush=True)

    mdir = os.path.join(args.outdir, "model")
    model = model.float().cpu()
    model.to(torch.bfloat16).save_pretrained(mdir)
    if args.draft:                                           # the demo's files, byte for byte
        shutil.copyfile(args.tokenizer, os.path.join(mdir, "tokenizer.json"))
        for name in ("tokenizer_config.json", "generation_config.json"):
            src = os.path.join(os.path.dirname(os.path.abspath(args.tokenizer)), name)
            if os.path.exists(src):
                shutil.copyfile(src, os.path.join(mdir, name))
            else:
                print(f"note: no {src} to copy", flush=True)
    else:
        tok.save(os.path.join(mdir, "tokenizer.json"))
    ref_model = model.float()                                # f32 arithmetic on the bf16 values
    no_dt_floor(ref_model)
    ref_model.eval()
    for r in reference(ref_model, tok, os.path.join(args.outdir, "reference")):
        print(repr(r["prompt"]), "->", repr(r["greedy_text"]), flush=True)


if __name__ == "__main__":
    main()
