#!/usr/bin/env python3
"""pad_tokenizer.py - a tokenizer.json for serving a synthetic model (stdlib only).

    dev/serve/pad_tokenizer.py MODEL BASE_TOKENIZER OUT.json

A synthetic model (`nemotron synth`) carries no tokenizer, and `nemotron serve` needs one
(`--tokenizer`). The demo model's has 4096 tokens; synthetic Nano's vocabulary is 131072, and
its random weights pick ids all over it. An id the tokenizer does not know decodes to nothing,
so the server would stream no event for ~97 % of the tokens and the client's timings (time to
first token, gaps) would be wrong. This writes BASE with its vocabulary padded to MODEL's
vocab_size: ids from BASE's size up get filler tokens (" x" and letters, distinct from every
token BASE has), reachable by no merge, so encoding is BASE's and every generated id decodes to
a few bytes, as a real tokenizer's would. A BASE already as large as MODEL's vocabulary gets
no fillers.

MODEL: a .nemo (its embedded config.json is read from the safetensors header, docs/NEMO.md) or
a model directory with config.json.
"""
import json
import os
import struct
import sys

BYTE_LEVEL_SPACE = "\u0120"   # byte-level BPE's character for the byte 0x20


def model_config(path):
    if os.path.isdir(path):
        with open(os.path.join(path, "config.json")) as f:
            return json.load(f)
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        entry = header.get("nemotron.file/config.json")
        if not entry:
            sys.exit("pad_tokenizer.py: %s carries no config.json" % path)
        begin, end = entry["data_offsets"]
        f.seek(8 + n + begin)
        return json.loads(f.read(end - begin))


def filler(i):
    """A distinct filler token for id i: byte-level " x" then i in base 26."""
    letters = ""
    while True:
        letters = chr(ord("a") + i % 26) + letters
        i //= 26
        if not i:
            return BYTE_LEVEL_SPACE + "x" + letters


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.split("\n\n")[1])
    model, base, out = sys.argv[1:]
    vocab_size = int(model_config(model)["vocab_size"])
    with open(base if not os.path.isdir(base) else os.path.join(base, "tokenizer.json")) as f:
        tok = json.load(f)
    vocab = tok["model"]["vocab"]
    used = set(vocab.values()) | {a["id"] for a in tok.get("added_tokens", [])}
    n_base = max(used) + 1
    if n_base > vocab_size:
        sys.exit("pad_tokenizer.py: the tokenizer has %d ids, more than the model's %d" % (n_base, vocab_size))
    for i in range(n_base, vocab_size):
        text, k = filler(i), 0
        while text in vocab:  # a base token that happens to read the same: lengthen it
            k += 1
            text = filler(i) + "x" * k
        vocab[text] = i
    with open(out, "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    print("pad_tokenizer.py: %s: %d tokens (%d from the base, %d fillers)" % (out, vocab_size, n_base, vocab_size - n_base))


if __name__ == "__main__":
    main()
