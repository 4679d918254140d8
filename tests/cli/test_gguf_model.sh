#!/usr/bin/env bash
# test_gguf_model.sh - llama.cpp GGUF files run as models (src/model/gguf_model.c) and their
# tokenizers (src/text/tokenizer_gguf.c).
#
# usage (from the repository root, as tests/run.sh does): bash tests/cli/test_gguf_model.sh build/nemotron
#
# tests/tools/write_gguf.py writes the bundled model as llama.cpp's converter lays out a
# nemotron_h_moe GGUF (its names, keys and transforms: A = -exp(A_log), squeezed conv, grouped
# norm, stacked experts), in F32 and in BF16. Those hold exactly the checkpoint's values (the
# checkpoint is bf16; A is written with the expf the engine applies), so
#   - logits of a 48-token text are bit-identical (cmp of the .npy) to the model directory's, for
#     both files, for a file whose head_count_kv metadata is all zeros (layer kinds and heads come
#     from the tensors), for a split into 3 parts opened by its first (a later part refused), for
#     the tiny tied model (make_model tiny-tied: no output.weight, every
#     block kind), and for a .nemo converted from the GGUF (--quant source), which carries the
#     chat template (tokenizer.chat_template -> its tokenizer_config.json);
#   - greedy text from `run -p` is the directory's, byte for byte;
#   - the tokenizer made from tokenizer.ggml.* gives the ids of the model's tokenizer.json on the
#     45 texts of tests/fixtures/tokenizer/cases.json (accents, CJK, emoji, special tokens in
#     text, invalid UTF-8, ...), and decodes them back the same; also the real llama.cpp file
#     ../shared/data/gguf/kjv-Q4_K_M.gguf (or $NT_GGUF_FILE; skipped when absent, as in a fresh
#     clone), whose metadata llama.cpp's own gguf-py wrote;
#   - broken files are refused with a message naming the GGUF tensor or key and a non-zero exit:
#     a missing tensor, a misshapen one, a missing key, a block of no known kind, another
#     architecture, a stacked-experts tensor of the wrong count, a truncated file;
#   - the real Q4_K_M file runs in its block types (src/quant/ggml_blocks.c, src/cpu/matmul_ggml.c)
#     and agrees with llama.cpp's outputs on it (tests/tools/check_llama_agreement.py: greedy ids,
#     teacher-forced argmax, the last 8 positions' logits; issue 18 item 3), and `convert` (no
#     --quant: a GGUF's default is source) writes a .nemo of it that keeps every block type
#     (nemotron.tensors: ggml.Q4_K, ggml.Q5_K, ggml.Q6_K, ggml.Q8_0) and gives the 48-token
#     logits bit-identical (cmp of the .npy) and the greedy `run` text byte for byte, with the
#     tokenizer and chat template carried (`template` renders the same); `--quant default` keeps
#     the blocks too (its logits bit-identical as well: the file's float tensors are vectors and
#     the f32 router, which every mix keeps f32).
# Needs python3 (standard library only). Prints one summary line.
suite=gguf_model
. "$(dirname "$0")/checks.sh"
make_model="$(dirname "$bin")/make_model"
[ -x "$make_model" ] || make_model=build/make_model
write() { python3 tests/tools/write_gguf.py "$@" 2>"$work/write.log" || { cat "$work/write.log" >&2; return 1; }; }
real=${NT_GGUF_FILE:-../shared/data/gguf/kjv-Q4_K_M.gguf}

# the reference file's 48-token text (King James English, a MoE-heavy mix of tokens)
seq48=328,386,500,322,628,43,467,290,1287,826,300,386,43,341,1412,433,363,43,299,416,351,363,43,335,522,290,371,310,328,290,1287,566,393,322,290,1832,300,290,1287,43,299,566,322,3097,106,107,873,43

logits() { "$bin" logits -m "$1" --tokens "$2" -o "$3" >/dev/null 2>"$work/logits.log" || { cat "$work/logits.log" >&2; return 1; }; }
refused() { # WORDS MODEL: loading fails, non-zero, the message holds WORDS
    if "$bin" generate -m "$2" --tokens 1 -n 1 >/dev/null 2>"$work/err.log"; then return 1; fi
    grep -qF -- "$1" "$work/err.log" || { echo "expected '$1' in: $(cat "$work/err.log")" >&2; return 1; }
}
same_logits() { # MODEL_A MODEL_B TOKENS
    logits "$1" "$3" "$work/a.npy" && logits "$2" "$3" "$work/b.npy" && cmp -s "$work/a.npy" "$work/b.npy"
}

check "write the F32 GGUF" write "$model" "$work/f32.gguf"
check "write the BF16 GGUF" write "$model" "$work/bf16.gguf" --type bf16
check "F32 GGUF: logits bit-identical to the directory's" same_logits "$model" "$work/f32.gguf" "$seq48"
check "BF16 GGUF: logits bit-identical to the directory's" same_logits "$model" "$work/bf16.gguf" "$seq48"
check "greedy run text identical" \
    cmp -s <("$bin" run -m "$model" -p "And God said" -n 24 --temp 0 2>/dev/null) \
           <("$bin" run -m "$work/f32.gguf" -p "And God said" -n 24 --temp 0 2>/dev/null)
check "write a split GGUF (3 parts)" write "$model" "$work/split-00001-of-00003.gguf" --type bf16 --split 3
check "split GGUF by its first part: logits bit-identical" \
    same_logits "$model" "$work/split-00001-of-00003.gguf" "$seq48"
check "split GGUF: a later part refused naming the first" \
    refused "open the first part (-00001-of-00003.gguf)" "$work/split-00002-of-00003.gguf"
check "gguf-info says it runs" grep -q "runs nemotron_h" <("$bin" gguf-info "$work/bf16.gguf")

# the tiny tied model: every block kind, no output.weight, other dimensions (error files below)
check "make_model tiny-tied" "$make_model" "$work/tiny" --shape tiny-tied --dtype bf16 --seed 3 >/dev/null
check "write the tiny GGUF" write "$work/tiny" "$work/tiny.gguf" --type bf16
check "tiny tied GGUF: logits bit-identical" same_logits "$work/tiny" "$work/tiny.gguf" 1,5,9,200,3,77
check "write a GGUF with zero head_count_kv" write "$work/tiny" "$work/kv0.gguf" --kv-zero
check "zero head_count_kv: logits bit-identical (heads from attn_k)" \
    same_logits "$work/tiny" "$work/kv0.gguf" 1,5,9,200,3,77
check "convert a GGUF to a .nemo (source)" bash -c "'$bin' convert '$work/bf16.gguf' -o '$work/from-gguf.nemo' --quant source >/dev/null 2>&1"
check ".nemo of the GGUF: logits bit-identical" same_logits "$model" "$work/from-gguf.nemo" "$seq48"
template_carried() { # the chat template: directory -> GGUF metadata -> the .nemo's tokenizer_config.json
    python3 - "$model/tokenizer_config.json" "$work/from-gguf.nemo" <<'PY'
import json, struct, sys
want = json.load(open(sys.argv[1]))['chat_template']
b = open(sys.argv[2], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
e = json.loads(b[8:8 + n])['nemotron.file/tokenizer_config.json']['data_offsets']
sys.exit(json.loads(b[8 + n + e[0]:8 + n + e[1]]).get('chat_template') != want)
PY
}
check ".nemo of the GGUF: the chat template carried" template_carried

# tokenizers: the directory's tokenizer.json against the GGUF metadata's
tokenizer_agrees() { # GGUF
    python3 - "$bin" "$tok" "$1" <<'PY'
import base64, json, subprocess, sys
bin, tok, gguf = sys.argv[1:4]
bad = 0
for c in json.load(open('tests/fixtures/tokenizer/cases.json')):
    text = base64.b64decode(c['text_b64'])
    out = [subprocess.run([bin, 'tokenize', '--tokenizer', t], input=text, capture_output=True).stdout
           for t in (tok, gguf)]
    back = [subprocess.run([bin, 'tokenize', '--tokenizer', t, '--decode'], input=out[0],
                           capture_output=True).stdout for t in (tok, gguf)]
    if out[0] != out[1] or not out[0].startswith(b'[') or back[0] != back[1]:
        print(f"tokenizer mismatch on {c['name']}: {out[0][:80]!r} vs {out[1][:80]!r}", file=sys.stderr)
        bad += 1
sys.exit(bad != 0)
PY
}
check "GGUF tokenizer ids = tokenizer.json ids (45 texts)" tokenizer_agrees "$work/f32.gguf"

broken() { # NAME WORDS WRITER-OPTIONS...
    local name=$1 words=$2
    shift 2
    write "$work/tiny" "$work/$name.gguf" "$@" && refused "$words" "$work/$name.gguf"
}
check "missing tensor named" broken omit "tensor 'blk.0.ssm_d' is missing" --omit blk.0.ssm_d
check "misshapen tensor named" broken shape "tensor 'blk.0.ssm_in.weight' has the shape" \
    --shape blk.0.ssm_in.weight=$(python3 -c "
import json; c = json.load(open('$work/tiny/config.json'))
nh, I = c['mamba_num_heads'], c['mamba_num_heads'] * c['mamba_head_dim']
print(f\"{2 * I + 2 * c['n_groups'] * c['ssm_state_size'] + nh},{c['hidden_size']}\")")
check "missing key named" broken key "GGUF key 'nemotron_h_moe.ssm.state_size' is missing" \
    --drop-key nemotron_h_moe.ssm.state_size
check "block of no kind named" broken kind "block 3 has none of" \
    --omit blk.3.ffn_up_exps.weight --omit blk.3.ffn_down_exps.weight --omit blk.3.ffn_gate_inp.weight \
    --omit blk.3.exp_probs_b.bias --omit blk.3.ffn_up_shexp.weight --omit blk.3.ffn_down_shexp.weight
check "another architecture refused" broken arch "GGUF architecture 'llama'" --arch llama
check "truncated file refused" bash -c "head -c 5000 '$work/tiny.gguf' > '$work/short.gguf'"
check "truncated file message" refused "short.gguf" "$work/short.gguf"

if [ -f "$real" ]; then
    check "real Q4_K_M file: tokenizer ids = tokenizer.json ids" tokenizer_agrees "$real"
    check "real Q4_K_M file: agreement with llama.cpp's outputs on it" \
        python3 tests/tools/check_llama_agreement.py "$bin" "$real" "${real%.gguf}.reference.json" \
        "${real%.gguf}.llama-logits-last8.npy"
    check "real Q4_K_M file: convert to .nemo" bash -c "'$bin' convert '$real' -o '$work/q.nemo' >/dev/null 2>&1"
    check "real Q4_K_M .nemo: block types kept" python3 - "$work/q.nemo" <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
h = json.loads(b[8:8 + struct.unpack('<Q', b[:8])[0]])
got = {v['format'] for v in json.loads(h['__metadata__']['nemotron.tensors']).values()}
sys.exit(got != {'ggml.Q4_K', 'ggml.Q5_K', 'ggml.Q6_K', 'ggml.Q8_0', 'F32', 'file'})
PY
    check "real Q4_K_M .nemo: logits bit-identical to the GGUF's" same_logits "$real" "$work/q.nemo" "$seq48"
    check "real Q4_K_M .nemo: greedy run text identical" \
        cmp -s <("$bin" run -m "$real" -p "And God said" -n 24 --temp 0 2>/dev/null) \
               <("$bin" run -m "$work/q.nemo" -p "And God said" -n 24 --temp 0 2>/dev/null)
    check "real Q4_K_M .nemo: greedy generate ids identical" \
        cmp -s <("$bin" generate -m "$real" --tokens "$seq48" -n 16 2>/dev/null) \
               <("$bin" generate -m "$work/q.nemo" --tokens "$seq48" -n 16 2>/dev/null)
    check "real Q4_K_M .nemo: its tokenizer gives the GGUF's ids" \
        cmp -s <(echo "And God said, Let there be light" | "$bin" tokenize --tokenizer "$real") \
               <(echo "And God said, Let there be light" | "$bin" tokenize --tokenizer "$work/q.nemo")
    check "real Q4_K_M, --quant default: blocks kept, logits bit-identical" \
        bash -c "'$bin' convert '$real' -o '$work/qd.nemo' --quant default >/dev/null 2>&1" &&
        check "  (compared)" same_logits "$real" "$work/qd.nemo" "$seq48"
else
    echo "gguf_model: $real absent: the real-file checks skipped"
fi
checks_summary
