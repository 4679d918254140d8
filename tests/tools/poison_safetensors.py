#!/usr/bin/env python3
"""poison_safetensors.py - writes BF16 NaN over one tensor of a .safetensors file in place (or
over one row of it), for the tests of non-finite values: the engine must fail the pass with an
error naming the first position they reach, never sample from them.

usage: poison_safetensors.py FILE TENSOR [ROW]
  TENSOR  the tensor's name in the file's header (a BF16 tensor: two bytes a value)
  ROW     only that row of a 2-D tensor
Standard library only.
"""
import json
import struct
import sys


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__.strip().splitlines()[4], file=sys.stderr)
        return 2
    path, name = sys.argv[1], sys.argv[2]
    row = sys.argv[3] if len(sys.argv) == 4 else ""
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        if name not in header:
            print(f"poison_safetensors: {path}: no tensor {name}", file=sys.stderr)
            return 1
        t = header[name]
        if t["dtype"] != "BF16":
            print(f"poison_safetensors: {name} is {t['dtype']}, not BF16", file=sys.stderr)
            return 1
        begin, end = t["data_offsets"]
        if row:
            width = 2 * t["shape"][1]
            begin, end = begin + int(row) * width, begin + (int(row) + 1) * width
        f.seek(8 + n + begin)
        f.write(b"\xc0\x7f" * ((end - begin) // 2))  # BF16 NaN
    return 0


if __name__ == "__main__":
    sys.exit(main())
