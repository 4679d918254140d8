#!/usr/bin/env bash
# make_corpus.sh - writes the committed seed corpus the fuzz targets replay in `make test`
# (tests/fuzz/corpus/NAME/, NAME = chat, config, gguf, nemo, request, safetensors,
# tokenizer). Rerun it only to
# change the seeds; inputs a fuzzer once failed on are added to the corpus by hand, under their
# libFuzzer name, and kept. Needs python3, and gcc for the .nemo seed writer.
#   tests/fuzz/make_corpus.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=tests/fuzz/corpus
mkdir -p $out/chat $out/config $out/gguf $out/nemo $out/request $out/safetensors $out/tokenizer

python3 - "$out" <<'PY'
import base64, glob, json, os, struct, sys
out = sys.argv[1]
def put(path, data):
    with open(os.path.join(out, path), 'wb') as f:
        f.write(data)

# safetensors: u64 LE header length, the header (padded with spaces), the data
def st(header, data, pad=0):
    h = header.encode() + b' ' * pad
    return struct.pack('<Q', len(h)) + h + data
put('safetensors/valid-f32-bf16', st('{"__metadata__":{"format":"pt"},'
    '"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},'
    '"b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]}}', bytes(range(22)), 3))
put('safetensors/valid-f16-empty', st('{"h":{"dtype":"F16","shape":[1,2],"data_offsets":[0,4]},'
    '"e":{"dtype":"U8","shape":[0],"data_offsets":[4,4]},'
    '"s":{"dtype":"I64","shape":[],"data_offsets":[4,12]}}', bytes(12)))
put('safetensors/escaped-names', st(r'''{'s\u0041':{"dtype":"F8_E4M3","shape":[2,1],"data_offsets":[2,4]},'''
    r'''"t\"q":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}}''', bytes(4), 1))
put('safetensors/hole', st('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
    '"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}}', bytes(20)))
put('safetensors/duplicate-in-entry', st('{"a":{"dtype":"F32","dtype":"F16","shape":[2],'
    '"data_offsets":[0,8]}}', bytes(8)))

# config: the fixtures' and the demo model's config.json, and one cut short
for path in sorted(glob.glob('tests/fixtures/*/config.json')) + ['models/nemotron-h-kjv/config.json']:
    name = path.split('/')[-2]
    put('config/' + name, open(path, 'rb').read())
put('config/cut', open('models/nemotron-h-kjv/config.json', 'rb').read()[:300])

# chat: byte 0 the flags (bit 0 generation prompt, 1 thinking, 2 truncate history thinking,
# 3 tools given, 4 thinking in prompt, 5 non-finite numbers allowed), the messages JSON, a NUL,
# the tools JSON
conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello.", "reasoning_content": "greet"},
        {"role": "user", "content": "Weather in Paris?"}]
tools = [{"type": "function", "function": {"name": "get_weather", "description": "the weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
calls = conv + [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function":
          {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
          {"role": "tool", "content": "{\"c\": 21}"}]
put('chat/plain', bytes([0b000111]) + json.dumps(conv).encode())
put('chat/no-think', bytes([0b000101]) + json.dumps(conv).encode())
put('chat/tools', bytes([0b001111]) + json.dumps(calls).encode() + b'\0' + json.dumps(tools).encode())
put('chat/reply', bytes([0b010011]) + b'<think>\nweather\n</think>\n<tool_call>\n<function=get_weather>\n'
    b'<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n')

# gguf: "GGUF", u32 version, u64 tensor count, u64 key count, the keys (string, u32 type, value),
# the tensor infos (string, u32 n_dims, u64 dims, u32 ggml type, u64 offset), padding to the
# alignment, the data. Strings are a u64 length and the bytes; arrays u32 type, u64 n, elements.
def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack('<Q', len(b)) + b
FMT = {0: '<B', 1: '<b', 2: '<H', 3: '<h', 4: '<I', 5: '<i', 6: '<f', 7: '<?', 10: '<Q', 11: '<q', 12: '<d'}
def gval(t, v):
    if t == 8: return gstr(v)
    if t == 9:
        et, items = v
        return struct.pack('<IQ', et, len(items)) + b''.join(gval(et, x) for x in items)
    return struct.pack(FMT[t], v)
# ggml types: number -> (elements, bytes) per block
BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
          12: (256, 144), 13: (256, 176), 14: (256, 210), 20: (32, 18), 23: (256, 136), 30: (1, 2), 39: (32, 17)}
def gguf(kvs, tensors, version=3, align=32):
    head = b'GGUF' + struct.pack('<IQQ', version, len(tensors), len(kvs))
    for k, t, v in kvs:
        head += gstr(k) + struct.pack('<I', t) + gval(t, v)
    off, infos, blobs = 0, b'', []
    for name, ne, ty, *fill in tensors:  # fill: an F32 tensor's values, repeated (else a byte pattern)
        n = 1
        for d in ne: n *= d
        nbytes = n // BLOCKS[ty][0] * BLOCKS[ty][1]
        infos += gstr(name) + struct.pack('<I', len(ne)) + b''.join(struct.pack('<Q', d) for d in ne)
        infos += struct.pack('<IQ', ty, off)
        vals = fill[0] if fill and isinstance(fill[0], list) else fill
        blobs.append((off, b''.join(struct.pack('<f', vals[i % len(vals)]) for i in range(n)) if fill else
                      bytes((i * 7 + 1) & 255 for i in range(nbytes))))
        off = (off + nbytes + align - 1) // align * align
    head += infos
    head += bytes(-len(head) % align)
    data = bytearray()
    for o, blob in blobs:
        data += bytes(o - len(data)) + blob
    return head + bytes(data)
put('gguf/every-value', gguf([
    ('general.architecture', 8, 'nemotron_h_moe'), ('u8', 0, 7), ('i8', 1, -7), ('u16', 2, 65535),
    ('i16', 3, -300), ('u32', 4, 4000000000), ('i32', 5, -5), ('f32', 6, 2.5), ('bool', 7, True),
    ('u64', 10, 2**64 - 1), ('i64', 11, -2**63), ('f64', 12, -0.125),
    ('nested', 9, (9, [(2, [1, 2]), (2, []), (8, ['deep'])])),
    ('tokenizer.ggml.tokens', 9, (8, ['<unk>', '<s>', '</s>', 'a', '\u0120the'])),
    ('tokenizer.ggml.merges', 9, (8, ['t h', '\u0120 th'])),
    ('tokenizer.ggml.token_type', 9, (5, [3, 3, 3, 1, 1])),
    ('tokenizer.ggml.bos_token_id', 4, 1), ('tokenizer.chat_template', 8, '{{ messages }}\n'),
], [('w.f32', [8, 2], 0), ('w.q4_0', [64, 2], 2), ('w.q8_0', [32], 8), ('w.mxfp4', [32, 2, 2], 39)]))
put('gguf/v2-kquants', gguf([('general.architecture', 8, 'nemotron_h'), ('general.alignment', 4, 64)],
    [('a.q4_k', [256, 2], 12), ('b.q6_k', [256], 14), ('c.q5_k', [256], 13), ('d.iq4_xs', [256], 23)],
    version=2, align=64))
put('gguf/legacy-quants', gguf([('general.alignment', 4, 8)],
    [('q4_1', [32], 3), ('q5_0', [32, 3], 6), ('q5_1', [64], 7), ('iq4_nl', [32], 20),
     ('f16', [3], 1), ('bf16', [5, 1, 1, 2], 30)], align=8))
# a whole nemotron_h_moe model in llama.cpp's names, one block of each kind (M * E -), hidden 8,
# F32 (A = ssm_a negative, as -exp(A_log) is), with a tekken byte-level tokenizer of 16 tokens
A = 'nemotron_h_moe.'
micro_tokens = ['<unk>', '<s>', '</s>', '<|im_end|>', 'a', 'b', 'c', ' ', '\u0120', '\u0120a', 'ab',
                '\u0120ab', '1', '.', '\u010a', 'abc']
put('gguf/micro-model', gguf([
    ('general.architecture', 8, 'nemotron_h_moe'), (A + 'block_count', 4, 4),
    (A + 'embedding_length', 4, 8), (A + 'context_length', 4, 64),
    (A + 'feed_forward_length', 9, (5, [0, 0, 4, 8])), (A + 'attention.head_count', 4, 2),
    (A + 'attention.head_count_kv', 9, (5, [0, 1, 0, 0])), (A + 'attention.key_length', 4, 4),
    (A + 'attention.layer_norm_rms_epsilon', 6, 1e-5), (A + 'ssm.conv_kernel', 4, 2),
    (A + 'ssm.state_size', 4, 4), (A + 'ssm.group_count', 4, 1), (A + 'ssm.inner_size', 4, 8),
    (A + 'ssm.time_step_rank', 4, 2), (A + 'expert_count', 4, 2), (A + 'expert_used_count', 4, 1),
    (A + 'expert_feed_forward_length', 4, 4), (A + 'expert_shared_feed_forward_length', 4, 4),
    (A + 'expert_weights_norm', 7, True), (A + 'expert_weights_scale', 6, 2.5),
    ('tokenizer.ggml.model', 8, 'gpt2'), ('tokenizer.ggml.pre', 8, 'tekken'),
    ('tokenizer.ggml.tokens', 9, (8, micro_tokens)),
    ('tokenizer.ggml.token_type', 9, (5, [3, 3, 3, 3] + [1] * 12)),
    ('tokenizer.ggml.merges', 9, (8, ['\u0120 a', 'a b', '\u0120 ab', 'ab c'])),
    ('tokenizer.ggml.bos_token_id', 4, 1), ('tokenizer.ggml.eos_token_id', 4, 2),
    ('tokenizer.ggml.add_bos_token', 7, True),
], [('token_embd.weight', [8, 16], 0, [0.5, -0.25, 0.75]), ('output_norm.weight', [8], 0, 1.0),
    ('output.weight', [8, 16], 0, [0.25, -0.5, 0.125, 1.0, -0.75]),
    ('blk.0.attn_norm.weight', [8], 0, 1.0), ('blk.0.ssm_in.weight', [8, 26], 0, 0.1),
    ('blk.0.ssm_conv1d.weight', [2, 16], 0, 0.5), ('blk.0.ssm_conv1d.bias', [16], 0, 0.0),
    ('blk.0.ssm_dt.bias', [2], 0, 0.5), ('blk.0.ssm_a', [1, 2], 0, -1.0), ('blk.0.ssm_d', [1, 2], 0, 1.0),
    ('blk.0.ssm_norm.weight', [8, 1], 0, 1.0), ('blk.0.ssm_out.weight', [8, 8], 0, 0.1),
    ('blk.1.attn_norm.weight', [8], 0, 1.0), ('blk.1.attn_q.weight', [8, 8], 0, 0.1),
    ('blk.1.attn_k.weight', [8, 4], 0, 0.1), ('blk.1.attn_v.weight', [8, 4], 0, 0.1),
    ('blk.1.attn_output.weight', [8, 8], 0, 0.1),
    ('blk.2.attn_norm.weight', [8], 0, 1.0), ('blk.2.ffn_gate_inp.weight', [8, 2], 0, 0.1),
    ('blk.2.exp_probs_b.bias', [2], 0, 0.0), ('blk.2.ffn_up_exps.weight', [8, 4, 2], 0, 0.1),
    ('blk.2.ffn_down_exps.weight', [4, 8, 2], 0, 0.1), ('blk.2.ffn_up_shexp.weight', [8, 4], 0, 0.1),
    ('blk.2.ffn_down_shexp.weight', [4, 8], 0, 0.1),
    ('blk.3.attn_norm.weight', [8], 0, 1.0), ('blk.3.ffn_up.weight', [8, 8], 0, 0.1),
    ('blk.3.ffn_down.weight', [8, 8], 0, 0.1)]))
put('gguf/metadata-only', gguf([('general.name', 8, 'x'), ('split.count', 2, 1)], []))

# request: byte 0 the flags (bit 0 completions, else chat; bit 1 the server's model is "demo";
# bits 2-3 the vocabulary: 1, 1000, 131072, INT32_MAX), then the body. test_server_request.c's
# good and bad bodies, and OpenAI's shapes.
CHAT, COMP, DEMO, V1000 = 0, 1, 2, 4
def req(name, flags, body):
    put('request/' + name, bytes([flags]) + (body if isinstance(body, bytes) else json.dumps(body).encode()))
user = [{"role": "user", "content": "q"}]
fn = {"type": "function", "function": {"name": "get_weather", "description": "the weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
req('chat-full', CHAT | DEMO, b'{"model":"demo","messages":[{"role":"system","content":"be brief"},'
    b'{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],'
    b'"temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.05,"max_completion_tokens":7,'
    b'"stop":["x","yy"],"seed":42,"presence_penalty":1,"frequency_penalty":-0.5,"stream":true,'
    b'"stream_options":{"include_usage":true},"chat_template_kwargs":{"enable_thinking":false}} \n')
req('chat-tools', CHAT | DEMO, {"model": "demo", "messages": [
    {"role": "developer", "content": "use tools"}, {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function":
        {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
    {"role": "tool", "content": "{\"c\": 21}", "tool_call_id": "c1"}],
    "tools": [fn], "tool_choice": "auto", "temperature": 0.7, "max_tokens": 16, "stop": ["\n\n"],
    "stream": True, "stream_options": {"include_usage": True}})
req('chat-tool-choice-none', CHAT, {"messages": user, "tools": [fn], "tool_choice": "none"})
req('chat-tool-choice-object', CHAT, {"messages": user, "tools": [fn], "parallel_tool_calls": False,
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})
req('chat-parts-unicode', CHAT, b'{"messages":[{"role":"user","content":[{"type":"text","text":"\\u00e9\\ud83d\\ude00"}]}],'
    b'"chat_template_kwargs":{"enable_thinking":false},"seed":-5,"top_k":3,"min_p":0.1}')
req('chat-speculative', CHAT | DEMO, {"model": "demo", "messages": user, "speculative": {"type": "mtp", "max": 3}})
req('chat-nulls', CHAT, {"messages": user, "temperature": None, "stop": None, "model": None, "stream_options": None,
    "n": 1, "logprobs": False, "user": "u", "response_format": {"type": "text"}})
req('completion-text', COMP | DEMO | V1000, {"model": "demo", "prompt": "In the beginning", "max_tokens": 5,
    "temperature": 0, "stop": "God", "speculative": {"type": "ngram", "max": 8}})
req('completion-ids', COMP | V1000, {"prompt": [1, 2, 3, 4, 999], "stream": False, "presence_penalty": 0.5,
    "frequency_penalty": 0.5, "n": 1, "stop": "\n"})
req('completion-one-string', COMP, {"prompt": ["hello"], "speculative": True})
req('completion-ids-big-vocab', COMP | 8, {"prompt": [0, 131071], "speculative": False, "seed": 9223372036854775807})
req('completion-ids-int-max', COMP | 12, {"prompt": [2147483646], "speculative": {"type": "none", "max": 1}})
req('completion-draft', COMP, {"prompt": "x", "speculative": {"type": "draft"}, "stream": True,
    "stream_options": {"include_usage": False}, "top_p": 1, "max_completion_tokens": 16777216})
# the bad ones: each names its field (or the body)
bad = [('empty', CHAT, b''), ('open-brace', CHAT, b'{'), ('array', CHAT, b'[]'), ('trailing', CHAT, b'{} x'),
       ('two-objects', CHAT, b'{"messages":[{"role":"user","content":"q"}]}{}'), ('no-messages', CHAT, b'{}'),
       ('messages-empty', CHAT, b'{"messages":[]}'), ('messages-string', CHAT, b'{"messages":"hi"}'),
       ('message-number', CHAT, b'{"messages":[1]}'),
       ('role-robot', CHAT, b'{"messages":[{"role":"robot","content":"q"}]}'),
       ('content-number', CHAT, b'{"messages":[{"role":"user","content":5}]}'),
       ('content-image', CHAT, b'{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}'),
       ('model-other', CHAT | DEMO, b'{"messages":[{"role":"user","content":"q"}],"model":"other"}'),
       ('model-number', CHAT, b'{"messages":[{"role":"user","content":"q"}],"model":7}'),
       ('prompt-out-of-vocab', COMP | V1000, b'{"prompt":[1,1000]}'), ('prompt-negative', COMP | V1000, b'{"prompt":[1,-1]}'),
       ('prompt-mixed', COMP | V1000, b'{"prompt":[1,"a"]}'), ('prompt-empty-array', COMP, b'{"prompt":[]}'),
       ('prompt-empty', COMP, b'{"prompt":""}'), ('prompt-object', COMP, b'{"prompt":{}}'),
       ('prompt-batch', COMP, b'{"prompt":["a","b"]}'), ('prompt-nested', COMP | V1000, b'{"prompt":[[1,2]]}'),
       ('max-tokens-inf', COMP, b'{"prompt":"a","max_tokens":1e999}'),
       ('temperature-nan', COMP, b'{"prompt":"a","temperature":NaN}'),
       ('nul-byte', COMP, b'{"prompt":"a"}\0 {'), ('deep', COMP, b'{"prompt":"a","x":' + b'[' * 100),
       ('prompt-nul-escape', COMP, b'{"prompt":"\\u0000"}'),
       ('stop-nul-escape', COMP, b'{"prompt":"a","stop":["\\u0000x"]}'),
       ('model-nul-escape', COMP | DEMO, b'{"prompt":"a","model":"demo\\u0000x"}'),
       ('spec-type', COMP, b'{"prompt":"a","speculative":{"type":"eagle"}}'),
       ('spec-max', COMP, b'{"prompt":"a","speculative":{"max":65}}'),
       ('spec-string', COMP, b'{"prompt":"a","speculative":"ngram"}')]
fields = ['"temperature":"hot"', '"temperature":true', '"temperature":3', '"top_p":0', '"top_p":1.5',
          '"top_k":1.5', '"top_k":-1', '"min_p":[]', '"max_tokens":0', '"max_tokens":"9"',
          '"max_completion_tokens":-3', '"stop":5', '"stop":[""]', '"stop":["a","b","c","d","e"]',
          '"seed":1.5', '"seed":18446744073709551616', '"stream":1', '"stream_options":[]',
          '"stream_options":{"include_usage":"yes"}', '"n":2', '"presence_penalty":9', '"tools":{}',
          '"tools":[{"type":"function"}]', '"chat_template_kwargs":[]',
          '"chat_template_kwargs":{"enable_thinking":0}']
for i, f in enumerate(fields):
    bad.append(('field-%02d' % i, CHAT, ('{"messages":[{"role":"user","content":"q"}],%s}' % f).encode()))
for name, flags, body in bad:
    req('bad-' + name, flags, body)

# tokenizer (text mode): the tokenizer fixture's texts
for c in json.load(open('tests/fixtures/tokenizer/cases.json')):
    put('tokenizer/' + c['name'], base64.b64decode(c['text_b64']))
PY

# nemo: fuzz_nemo.c's own seed writer (real .nemo files through the library's writer)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -std=c11 -D_GNU_SOURCE -O1 -fopenmp -DFUZZ_NEMO_WRITE_SEEDS -Iinclude -Isrc -Itests \
    $(pkg-config --cflags json-c) src/*.c src/model/*.c src/quant/*.c src/cpu/*.c src/engine/*.c \
    src/text/*.c src/convert/*.c tests/fuzz/fuzz_nemo.c -o "$tmp/seeds" \
    $(pkg-config --libs json-c libpcre2-8 zlib) -lm
"$tmp/seeds" $out/nemo
echo "make_corpus: $(find $out -type f | wc -l) files, $(du -sh $out | cut -f1)"
