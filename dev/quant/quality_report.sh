#!/usr/bin/env bash
# quality_report.sh - the model-level measurements of docs/QUANT.md, on the fixtures and the demo.
#
#   dev/quant/quality_report.sh [KJV_HELDOUT_TEXT]
#
# For each model: the real .nemo files (`nemotron convert --quant default | q8_2f`: packed weights
# and the kernels' int8 activations), and weight-only copies through each format
# (dev/quant/fake_quant.c: f32 weights after quantize-dequantize, float products), so q4tp meets
# the 4.5-bit baselines, which have no kernels, on equal terms. Prints markdown tables
# (dev/quant/model_quality.py). The demo model is measured on held-out King James text: the given
# file, else the text the demo never trained on, made here when Debian's `bible` command is
# installed (apt-get install bible-kjv): the last 3 % of the prose tools/train_demo.py trains on,
# cut by its own kjv_prose (read out of the script, whose torch imports this machine need not
# have). Without either, random tokens like the fixtures.
set -euo pipefail
cd "$(dirname "$0")/../.."
make -s cpu build/dev/fake_quant
source tests/support/python_numpy.sh
[ -n "$py" ] || { echo "quality_report: needs python3 with numpy" >&2; exit 1; }
work=$(mktemp -d /tmp/nemotron-quality.XXXXXX)
trap 'rm -rf "$work"' EXIT
heldout=${1:-}
if [ -z "$heldout" ] && command -v bible >/dev/null 2>&1; then
    bible "Gen1:1-Rev22:21" > "$work/kjv.txt"
    "$py" - "$work/kjv.txt" "$work/heldout.txt" <<'PY'
import ast, sys
src = open("tools/train_demo.py").read()
fn = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == "kjv_prose")
ns = {}
exec(compile(ast.Module([fn], []), "tools/train_demo.py", "exec"), ns)
text = ns["kjv_prose"](sys.argv[1])
open(sys.argv[2], "w", encoding="utf-8").write(text[int(len(text) * 0.97):])  # train_demo.py's split
PY
    heldout="$work/heldout.txt"
fi

report() { # report NAME MODEL_DIR SOURCE_ARGS...
    local name=$1 dir=$2
    shift 2
    local w="$work/$name"
    mkdir -p "$w"
    build/nemotron convert "$dir" -o "$w/default.nemo" --quant default 2>/dev/null
    build/nemotron convert "$dir" -o "$w/q8_2f.nemo" --quant q8_2f 2>/dev/null
    local c=()
    for v in "q4tp none" "base4 none" "base4s none" "q4_0 none" "q4tp q8_2f" "q8_2f q8_2f"; do
        set -- $v
        mkdir -p "$w/$1-$2"
        build/dev/fake_quant "$dir" "$w/$1-$2" "$1" "$2"
        c+=("weights: experts $1, projections $2=$w/$1-$2")
    done
    echo "### $name"
    echo
    "$py" dev/quant/model_quality.py --ref "$dir" "${SOURCE[@]}" \
        "default .nemo (q4tp experts, q8_2f projections)=$w/default.nemo" "q8_2f .nemo=$w/q8_2f.nemo" "${c[@]}"
    echo
}

for fx in hybrid-group-f32 tied-bf16 dense-f16 latent-mtp-f32; do
    vocab=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "tests/fixtures/$fx/config.json")
    SOURCE=(--random "$vocab" --windows 4 --len 64)
    report "$fx" "tests/fixtures/$fx"
done
if [ -n "$heldout" ]; then SOURCE=(--text "$heldout" --windows 16 --len 128)
else SOURCE=(--random 4096 --windows 16 --len 128); fi
report "nemotron-h-kjv" models/nemotron-h-kjv
