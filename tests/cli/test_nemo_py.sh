#!/usr/bin/env bash
# test_nemo_py.sh - tools/nemo.py (the independent Python reader) against the C readers.
#
# usage (from the repository root, as tests/run.sh does): bash tests/cli/test_nemo_py.sh build/nemotron
#
# Builds tests/tools/nemo_probe.c against the library next to the given command
# (BUILD/libnemotron.a; the AddressSanitizer flags when BUILD is an asan build), writes a small
# .nemo with q8_2f, q4tp, F32, BF16 and F16 tensors and three files, and checks that
#   - nemo.py verify accepts it and nemo.py list shows every entry, with the C reader's
#     formats and shapes, checksums ok;
#   - nemo.py dequant gives, for every tensor, what nt_matrix_dequant_row gives: bit for bit for
#     q8_2f and the plain dtypes, within 4 f32 ulp for q4tp (the engine's exp2 is a polynomial,
#     Python's is libm's);
#   - nemo.py file returns the embedded files byte for byte, and show runs;
#   - a flipped data byte, a truncated file and a file that is not a .nemo are refused by both
#     readers, with a message and no Python traceback;
#   - a .nemo converted from a GGUF in llama.cpp's block types (dev/gguf/synth_gguf.py, q5 mix):
#     nemo.py verify accepts it, list shows its ggml.* formats, and dequant of a block-typed
#     tensor is refused with a message (the tool does not decode them), no traceback.
# Needs python3 with numpy (scripts/setup.sh installs python3-numpy). Prints one summary line.
set -u
cd "$(dirname "$0")/../.." || exit 1
bin=${1:-build/nemotron}
build=$(dirname "$bin")
checks=0
failed=0
pass() { checks=$((checks + 1)); }
fail() { checks=$((checks + 1)); failed=$((failed + 1)); echo "FAIL nemo_py: $*" >&2; }
summary() { printf '%-28s %d checks, %d failed\n' nemo_py "$checks" "$failed"; [ "$failed" -eq 0 ]; }

work=$(mktemp -d /tmp/nemotron-test-nemo-py.XXXXXX)
trap 'rm -rf "$work"' EXIT

source tests/support/python_numpy.sh
if [ -z "$py" ]; then
    fail "no python3 with numpy (run scripts/setup.sh)"
    summary
    exit 1
fi

lib="$build/libnemotron.a"
if [ ! -f "$lib" ]; then
    fail "$lib not built (make cpu first)"
    summary
    exit 1
fi
san=""
case "$build" in *asan*) san="-fsanitize=address,undefined -fno-sanitize-recover=undefined" ;; esac
# shellcheck disable=SC2046,SC2086
if ! ${CC:-cc} -std=c11 -D_GNU_SOURCE -O1 -g -Iinclude -Isrc -Itests -fopenmp $san \
    tests/tools/nemo_probe.c "$lib" $(pkg-config --libs json-c libpcre2-8 zlib 2>/dev/null ||
    echo -ljson-c -lpcre2-8 -lz) -lm -o "$work/nemo_probe" 2>"$work/err"; then
    fail "building nemo_probe: $(cat "$work/err")"
    summary
    exit 1
fi
probe="$work/nemo_probe"
nemo() { "$py" tools/nemo.py "$@"; }

f="$work/m.nemo"
if "$probe" write "$f" 2>"$work/err"; then pass; else fail "nemo_probe write: $(cat "$work/err")"; fi

# verify and list
if nemo verify "$f" >"$work/out" 2>&1 && grep -q "OK: 7 tensors, 3 files" "$work/out"; then pass
else fail "nemo.py verify: $(cat "$work/out")"; fi
nemo list "$f" >"$work/list" 2>&1 || fail "nemo.py list exited $?: $(cat "$work/list")"
"$probe" list "$f" >"$work/clist" 2>&1 || fail "nemo_probe list: $(cat "$work/clist")"
n=0
while read -r name fmt rest; do
    shape=${rest% *}
    bytes=${rest##* }
    n=$((n + 1))
    # nemo.py: name format shape bytes crc ok; the shapes print alike ([a, b])
    if grep -F -- "$name" "$work/list" | grep -F -- " $fmt " | grep -F -- "$shape" |
        grep -E -q -- " $bytes +[0-9a-f]{8} ok$"; then pass
    else fail "nemo.py list disagrees on '$name' ($fmt $shape $bytes): $(grep -F -- "$name" "$work/list")"; fi
done <"$work/clist"
if [ "$n" -eq 10 ] && [ "$(grep -c ' ok$' "$work/list")" -eq 10 ]; then pass
else fail "expected 10 entries listed by both readers, got $n (C) and $(grep -c ' ok$' "$work/list") ok (Python)"; fi

# dequant: every tensor, against nt_matrix_dequant_row
while read -r name fmt shape; do
    [ "$fmt" = file ] && continue
    if ! nemo dequant "$f" "$name" -o "$work/py.npy" 2>"$work/err"; then
        fail "nemo.py dequant '$name': $(cat "$work/err")"; continue
    fi
    if ! "$probe" dequant "$f" "$name" "$work/c.f32" 2>"$work/err"; then
        fail "nemo_probe dequant '$name': $(cat "$work/err")"; continue
    fi
    if "$py" - "$work/py.npy" "$work/c.f32" "$fmt" "$name" <<'PY' 2>"$work/cmp"; then pass; else fail "dequant '$name' ($fmt): $(cat "$work/cmp")"; fi
import sys, numpy as np
a = np.load(sys.argv[1])
b = np.fromfile(sys.argv[2], dtype="<f4")
fmt = sys.argv[3]
if a.dtype != np.float32 or a.size != b.size or a.size == 0:
    sys.exit(f"dtype {a.dtype}, {a.size} values from Python, {b.size} from C")
a = a.ravel()
if not np.isfinite(a).all() or not np.any(a != 0):
    sys.exit("values not finite, or all zero")
if fmt == "q4tp":
    # within 4 ulp of the C value, elementwise
    tol = 4 * np.spacing(np.abs(b).astype(np.float32))
    bad = np.abs(a - b) > tol
else:
    bad = a.view(np.uint32) != b.view(np.uint32)
if bad.any():
    i = int(np.argmax(bad))
    sys.exit(f"{int(bad.sum())} of {a.size} values differ; first at {i}: python {a[i]!r} C {b[i]!r}")
PY
done < <(sed -n 's/^\([^ ]*\) \([^ ]*\) \(\[.*\]\) [0-9]*$/\1 \2 \3/p' "$work/clist")

# embedded files, byte for byte
for name in config.json tokenizer_config.json generation_config.json; do
    if nemo file "$f" "$name" -o "$work/$name" 2>"$work/err" && [ -s "$work/$name" ] &&
        nemo file "$f" "$name" | cmp -s - "$work/$name"; then pass
    else fail "nemo.py file $name: $(cat "$work/err")"; fi
done
if grep -q '"hidden_size": 64' "$work/config.json"; then pass; else fail "config.json content: $(cat "$work/config.json")"; fi
if nemo file "$f" missing.json >/dev/null 2>"$work/err" || ! grep -q "no entry" "$work/err"; then
    fail "a missing embedded file: $(cat "$work/err")"; else pass; fi
if nemo show "$f" model.layers.1.mixer.experts.0.up_proj.weight >"$work/out" 2>&1 &&
    grep -q "^codes " "$work/out" && grep -q "^values " "$work/out"; then pass
else fail "nemo.py show q4tp: $(cat "$work/out")"; fi
if nemo show "$f" model.layers.0.mixer.in_proj.weight >"$work/out" 2>&1 && grep -q "^rs " "$work/out"; then pass
else fail "nemo.py show q8_2f: $(cat "$work/out")"; fi

# refusals: one flipped data byte (in the q4tp tensor), a truncated file, a plain file
"$py" - "$f" "$work/flip.nemo" "$work/cut.nemo" <<'PY'
import sys
b = bytearray(open(sys.argv[1], 'rb').read())
n = int.from_bytes(b[:8], 'little')
c = bytearray(b)
c[8 + n + 2572 + 10] ^= 0x20   # the second tensor: after the 37 x 64 q8_2f payload (2570 bytes, padded to 2572)
open(sys.argv[2], 'wb').write(c)
open(sys.argv[3], 'wb').write(b[:len(b) - 5])
PY
if nemo verify "$work/flip.nemo" >"$work/out" 2>&1; then fail "nemo.py verify accepted a flipped byte"
elif grep -q "up_proj.weight'*: checksum mismatch" "$work/out" && ! grep -q Traceback "$work/out"; then pass
else fail "nemo.py verify on a flipped byte: $(cat "$work/out")"; fi
if nemo list "$work/flip.nemo" >"$work/out" 2>&1; then fail "nemo.py list exits 0 on a bad checksum"
elif grep -q "up_proj.weight .*BAD" "$work/out"; then pass; else fail "nemo.py list BAD mark: $(cat "$work/out")"; fi
if "$probe" open "$work/flip.nemo" 2>"$work/err"; then fail "the C reader accepted a flipped byte"
elif grep -q "up_proj.weight': checksum mismatch" "$work/err"; then pass; else fail "C reader on a flipped byte: $(cat "$work/err")"; fi
for bad in "$work/cut.nemo" tests/fixtures/tied-bf16/model.safetensors "$work/none.nemo"; do
    if nemo verify "$bad" >"$work/out" 2>&1; then fail "nemo.py verify accepted $bad"
    elif grep -q "^nemo.py: " "$work/out" && ! grep -q Traceback "$work/out"; then pass
    else fail "nemo.py verify on $bad: $(cat "$work/out")"; fi
    if "$probe" open "$bad" 2>/dev/null; then fail "the C reader accepted $bad"; else pass; fi
done

# a GGUF's block types in a .nemo
g="$work/q5.gguf"
if python3 dev/gguf/synth_gguf.py models/nemotron-h-kjv "$g" --mix q5 --jobs 1 >"$work/out" 2>&1 &&
    "$bin" convert "$g" -o "$work/q5.nemo" >>"$work/out" 2>&1; then pass
else fail "writing the q5 GGUF and its .nemo: $(cat "$work/out")"; fi
if nemo verify "$work/q5.nemo" >"$work/out" 2>&1 && grep -q "OK: .* every checksum verified" "$work/out"; then pass
else fail "nemo.py verify on a converted GGUF: $(cat "$work/out")"; fi
if nemo list "$work/q5.nemo" >"$work/out" 2>&1 && grep -q " ggml.Q5_0 " "$work/out" &&
    grep -q " ggml.Q4_K " "$work/out"; then pass
else fail "nemo.py list on a converted GGUF: $(cat "$work/out")"; fi
if nemo dequant "$work/q5.nemo" backbone.layers.0.mixer.out_proj.weight -o "$work/w.npy" >"$work/out" 2>&1; then
    fail "nemo.py dequant of a block type exited 0"
elif grep -q "does not decode it" "$work/out" && ! grep -q Traceback "$work/out"; then pass
else fail "nemo.py dequant of a block type: $(cat "$work/out")"; fi

summary
