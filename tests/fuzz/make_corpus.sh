#!/usr/bin/env bash
# make_corpus.sh - writes the committed seed corpus the fuzz targets replay in `make test`
# (tests/fuzz/corpus/NAME/, NAME = chat, config, nemo, safetensors, tokenizer). Rerun it only to
# change the seeds; inputs a fuzzer once failed on are added to the corpus by hand, under their
# libFuzzer name, and kept. Needs python3, and gcc for the .nemo seed writer.
#   tests/fuzz/make_corpus.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=tests/fuzz/corpus
mkdir -p $out/chat $out/config $out/nemo $out/safetensors $out/tokenizer

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
