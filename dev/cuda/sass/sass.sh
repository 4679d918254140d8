#!/usr/bin/env bash
# sass.sh TREE... - the sm_90 machine code of decode.cu in each TREE (a directory holding the
# repository's src/ and include/: a worktree, or a copy with dev/wip patches applied), for reading
# and comparing without a GPU (README.md here).
#
# For each TREE: nvcc with the Makefile's flags (sm_90 only, as a cubin; ptxas -v: registers,
# spills, shared memory) into TREE/sass/, the cubin split into its kernels' sections (elfsec.py),
# each kernel disassembled (dis.py: nvdisasm -b SM90 on the raw .text, NVDISASM names the binary)
# and annotated with its source lines (annot.py). Then, against the first TREE: the resources of
# every kernel, and whether each kernel's machine code is byte for byte the first TREE's. FILE=x.cu
# (default decode.cu) picks another file of src/cuda.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
file=${FILE:-decode.cu}
for t in "$@"; do
    mkdir -p "$t/sass"
    (cd "$t" && nice -n 19 nvcc -std=c++17 -O3 -lineinfo -fmad=false -gencode arch=compute_90,code=sm_90 \
        -Iinclude -Isrc -Xptxas -v -cubin "src/cuda/$file" -o "sass/${file%.cu}.cubin" ${NVCC_EXTRA:-}) \
        >"$t/sass/ptxas.txt" 2>&1 || { cat "$t/sass/ptxas.txt"; exit 1; }
    python3 "$here/elfsec.py" "$t/sass/${file%.cu}.cubin" "$t/sass"
    for f in "$t"/sass/text.*; do python3 "$here/dis.py" "$f" "${f/text./sass.}.sass"; done
    python3 "$here/annot.py" "$t/sass/${file%.cu}.cubin" "$t/sass" >/dev/null
done
first=$1
for t in "$@"; do
    echo "== $t"
    python3 - "$t/sass/ptxas.txt" <<'PY'
import re, sys
txt = open(sys.argv[1]).read()
for m in re.finditer(r"Compiling entry function '(\S+)'.*?\n(.*?)Compile time", txt, re.S):
    b = m.group(2)
    regs = re.search(r"Used (\d+) registers", b).group(1)
    sm = re.search(r"(\d+) bytes smem", b)
    sp = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", b)
    print(f"  {m.group(1):48s} {regs:>3s} registers, {sm.group(1) if sm else 0:>5} B static shared, "
          f"spill stores/loads {sp.group(2)}/{sp.group(3)} B")
PY
    for f in "$t"/sass/text.*; do
        k=${f##*/text.}
        n=$(( $(stat -c %s "$f") / 16 ))
        same=""
        if [ "$t" != "$first" ]; then
            if [ -f "$first/sass/text.$k" ]; then
                cmp -s "$f" "$first/sass/text.$k" && same="  byte for byte $first's" || same="  differs from $first's"
            else
                same="  (not in $first)"
            fi
        fi
        printf '  %-48s %5d instructions%s\n' "$k" "$n" "$same"
    done
done
