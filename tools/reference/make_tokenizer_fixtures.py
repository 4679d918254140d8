#!/usr/bin/env python3
"""make_tokenizer_fixtures.py - byte-level BPE tokenizers of the Nemotron-3 kind, and what
HF `tokenizers` (0.23) makes of a set of hard texts.

Runs on the GPU machine (it has `tokenizers`; nothing here needs the GPU). Trains on CORPUS
(a few MB of varied text: licences, C headers, Python, docs, JSON) plus the multilingual
lines below, with the Nemotron-3 pre-tokenizer (MODEL.md 5.2: a regex Split, behaviour
"isolated", then ByteLevel without its own regex) and a ByteLevel decoder, and Nemotron's
special tokens in the Tekken layout (<unk> <s> </s> ... <|im_start|>=10 <|im_end|>=11
<think>=12 </think>=13 <tool_call>=14 </tool_call>=15).

Writes into OUTDIR:
  small.json        vocab 4096, no post-processor
  small-bos.json    the same model with a TemplateProcessing post-processor "<s> $A"
  big.json          vocab 131072 (the Nemotron size), for the speed benchmark
  cases.json        [{"name", "text_b64" (UTF-8 bytes, possibly invalid), "text" (what
                    tokenizers saw: invalid bytes replaced by U+FFFD),
                    "ids": {tokenizer: [...]}, "ids_bos": [...] (small-bos, with special
                    tokens added), "decoded": {tokenizer: str}, "decoded_skip": {tokenizer: str}}]
usage: python3 make_tokenizer_fixtures.py CORPUS OUTDIR
"""
import base64, json, os, sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

NEMOTRON3_SPLIT = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
    r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

SPECIAL = ["<unk>", "<s>", "</s>"] + [f"<SPECIAL_{i}>" for i in range(3, 10)] + [
    "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>"] + [f"<SPECIAL_{i}>" for i in range(18, 32)]

MULTILINGUAL = [
    "Le cœur a ses raisons que la raison ne connaît point. Ça va très bien, merci.",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein. Straße, Größe, Äpfel.",
    "El niño comió piña en la montaña; ¿dónde está el baño? ¡Olé!",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Η γλώσσα μου έδωσαν ελληνική· το σπίτι φτωχικό στις αμμουδιές του Ομήρου.",
    "日本語の文章を書くのは楽しいです。東京は大きな都市です。",
    "我们一起学习中文。今天天气很好，我们去公园散步吧。",
    "한국어는 아름다운 언어입니다. 서울에서 만나요.",
    "مرحبا بالعالم. اللغة العربية جميلة جدا، وتكتب من اليمين إلى اليسار.",
    "שלום עולם. עברית נכתבת מימין לשמאל.",
    "नमस्ते दुनिया। हिन्दी भाषा बहुत सुंदर है।",
    "สวัสดีครับ ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Tiếng Việt có nhiều dấu: ặ ẫ ờ ữ ỵ.",
]

CASES = [
    ("empty", b""),
    ("ascii", b"Hello, world! This is a test of the tokenizer."),
    ("ascii_caps", b"HELLO World CamelCaseWords and snake_case_words and ALLCAPS."),
    ("contractions", b"I'm sure it's fine, don't worry; we'll see, they've gone, you'd know."),
    ("accents", "café naïve résumé Ångström façade jalapeño São Paulo Zürich".encode()),
    ("combining", "e\u0301 a\u0300 n\u0303 o\u0308 Z\u0351\u0356 q\u0307\u0323 (decomposed marks)".encode()),
    ("cjk", "日本語のテキスト、中文文本，한국어 텍스트。全角！？".encode()),
    ("emoji", "I love 🍕 and 🎉! 😀😃😄 👍🏽 👩🏿‍💻 👨‍👩‍👧‍👦 ❤️‍🔥".encode()),
    ("flags", "Flags: 🇫🇷 🇯🇵 🇺🇸 🇧🇷 🏳️‍🌈 🏴‍☠️".encode()),
    ("rtl", "مرحبا بالعالم، كيف حالك؟ שלום, מה שלומך? mixed עם English".encode()),
    ("digits", b"Numbers: 0 7 42 123 4567 89012 3.14159 1,000,000 2026-12-02 0x1F 1e-5"),
    ("digit_run", b"12345678901234567890123456789012345678901234567890"),
    ("spaces", "a  b   c    d     e      f       g\u00a0h".encode()),
    ("space_runs", b"   leading and trailing   \n\n\n   \t\t  "),
    ("tabs", b"col1\tcol2\t\tcol3\n\tindented\t\n"),
    ("crlf", b"line one\r\nline two\r\n\r\nline four\rold mac\n"),
    ("code_c", b"int main(int argc, char **argv) {\n    for (int i = 0; i < argc; i++) printf(\"%s\\n\", argv[i]);\n    return 0;\n}\n"),
    ("code_py", b"def f(x):\n    return [y ** 2 for y in range(x) if y % 3 == 0]  # squares\n\nclass A(B):\n    pass\n"),
    ("json", b'{"name": "nemotron", "layers": [1, 2, 3], "ok": true, "nested": {"a": null, "b": -1.5e3}}'),
    ("urls", b"See https://example.com/path?q=1&r=two#frag or mailto:someone@example.org."),
    ("punct", b"Wait... what?! (Really?) [Yes.] {No!} <maybe> \"quoted\" 'single' --- ~~~ ### @@@"),
    ("special_embedded", b"<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\nhmm\n</think>\nHello!<|im_end|>"),
    ("special_adjacent", b"<s></s><unk><tool_call>{\"a\":1}</tool_call><|im_end|><|im_end|>text<s>"),
    ("special_partial", b"<|im_start and <|im_end| and <think > and </ think> are not special"),
    ("invalid_utf8", b"valid \xff\xfe bytes \xc3\x28 and \xe2\x82 truncated \xf0\x9f\x98 end"),
    ("lone_continuation", b"\x80\x81\x82 start with continuation bytes"),
    ("overlong", b"overlong \xc0\xaf slash and \xed\xa0\x80 surrogate"),
    ("nul_and_controls", b"nul \x00 bell \x07 esc \x1b[0m del \x7f done"),
    ("zero_width", "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom\u2060wj".encode()),
    ("math", "∀x∈ℝ: x² ≥ 0; ∑ᵢ aᵢ = ∞; α+β=γ; ½ ¼ ⅞ ①②③".encode()),
    ("long_word", b"Pneumonoultramicroscopicsilicovolcanoconiosis and antidisestablishmentarianism"),
    ("multiline_prose", ("It was the best of times, it was the worst of times, it was the age of wisdom,\n"
                         "it was the age of foolishness, it was the epoch of belief.\n\n"
                         "    Indented paragraph with trailing spaces.   \n").encode()),
] + [(f"multilingual_{i}", s.encode()) for i, s in enumerate(MULTILINGUAL)]


def build(vocab_size, corpus_files, extra, synthetic_words=0):
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(NEMOTRON3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(iterator(corpus_files, extra, synthetic_words), trainer=trainer)
    return tok


def syllable_text(n_words, seed=7):
    """Pseudo-words from a fixed syllable set in three scripts: a few MB of text with far more
    distinct pairs than real prose, so the big vocabulary can reach 131072 entries."""
    import random
    rng = random.Random(seed)
    syl = ([a + b for a in "bcdfghjklmnprstvwz" for b in "aeiou"] +
           [chr(0x3041 + i) for i in range(80)] + [chr(0x0430 + i) for i in range(32)])
    for _ in range(n_words // 16):
        yield " ".join("".join(rng.choice(syl) for _ in range(rng.randint(2, 5))) for _ in range(16)) + "\n"


def iterator(files, extra, synthetic_words=0):
    for f in files:
        with open(f, "rb") as fh:
            for line in fh:
                yield line.decode("utf-8", "replace")
    for _ in range(50):
        yield from extra
    yield from syllable_text(synthetic_words)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    corpus, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    small = build(4096, [corpus], MULTILINGUAL)
    small.save(os.path.join(out, "small.json"))
    bos = Tokenizer.from_file(os.path.join(out, "small.json"))
    bos.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)])
    bos.save(os.path.join(out, "small-bos.json"))
    big = build(131072, [corpus], MULTILINGUAL, synthetic_words=1500000)
    big.save(os.path.join(out, "big.json"))
    toks = {"small": small, "big": big}
    cases = []
    for name, raw in CASES:
        text = raw.decode("utf-8", "replace")
        c = {"name": name, "text_b64": base64.b64encode(raw).decode(), "text": text,
             "ids": {}, "decoded": {}, "decoded_skip": {}}
        for tn, t in toks.items():
            ids = t.encode(text, add_special_tokens=False).ids
            c["ids"][tn] = ids
            c["decoded"][tn] = t.decode(ids, skip_special_tokens=False)
            c["decoded_skip"][tn] = t.decode(ids, skip_special_tokens=True)
        c["ids_bos"] = bos.encode(text, add_special_tokens=True).ids
        cases.append(c)
    json.dump(cases, open(os.path.join(out, "cases.json"), "w"), ensure_ascii=False, indent=1)
    for tn, t in toks.items():
        print(tn, "vocab", t.get_vocab_size(), flush=True)
    print("cases", len(cases), "roundtrip failures (small):",
          [c["name"] for c in cases if c["decoded"]["small"] != c["text"]])


if __name__ == "__main__":
    main()
