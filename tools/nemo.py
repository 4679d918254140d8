#!/usr/bin/env python3
"""nemo.py - an independent reader of .nemo model files (docs/NEMO.md), in Python 3 + numpy.

Written from docs/NEMO.md and FORMATS.md, not from the C code, so that the two readers check
each other. Commands:

    nemo.py list FILE                 every entry: name, format, logical shape, bytes, checksum
    nemo.py verify FILE               all structural checks and every CRC-32; exit 1 on a problem
    nemo.py show FILE NAME            one tensor: layout facts and value statistics
    nemo.py dequant FILE NAME -o OUT.npy   the tensor as an f32 array (packed formats decoded)
    nemo.py file FILE NAME [-o OUT]   an embedded file's bytes (to stdout without -o)

The file is memory-mapped, so large models are read lazily; checksums use zlib.crc32.
"""
import argparse
import json
import mmap
import sys
import zlib

import numpy as np

FILE_PREFIX = "nemotron.file/"
PLAIN = {"F32": (np.dtype("<f4"), 4), "F16": (np.dtype("<f2"), 2), "BF16": (np.dtype("<u2"), 2)}
# llama.cpp's block types (docs/FORMATS-GGUF.md): elements and bytes per block; a matrix is
# rows x cols / elements blocks, the GGUF tensor's bytes as they were
GGML = {"ggml.Q8_0": (32, 34), "ggml.Q4_0": (32, 18), "ggml.Q4_1": (32, 20), "ggml.Q5_0": (32, 22),
        "ggml.Q5_1": (32, 24), "ggml.IQ4_NL": (32, 18), "ggml.MXFP4": (32, 17),
        "ggml.Q4_K": (256, 144), "ggml.Q5_K": (256, 176), "ggml.Q6_K": (256, 210)}
PACKED = ("q8_2f", "q4tp") + tuple(GGML)
CRC_CHUNK = 64 << 20  # bytes per zlib.crc32 call: bounded memory per call on huge tensors


class NemoError(Exception):
    pass


def _unique_object(pairs):
    """json object_pairs_hook: refuse a key given twice (json.loads would keep the last)."""
    out = {}
    for k, v in pairs:
        if k in out:
            raise NemoError(f"key {k!r} appears more than once")
        out[k] = v
    return out


def _round4(n):
    return (n + 3) // 4 * 4


def payload_bytes(fmt, rows, cols):
    """FORMATS.md: q8_2f = q + rs + cs, padded to 4; q4tp = nibbles + params + codes, padded to
    4, plus one spare u32 word (the last group's 2-byte code read)."""
    if fmt in GGML:
        return rows * cols // GGML[fmt][0] * GGML[fmt][1]
    if fmt == "q8_2f":
        return _round4(rows * cols + 2 * rows + 2 * cols)
    gpr = cols // 32
    cstride = (gpr * 5 + 7) // 8
    return _round4(rows * gpr * 16 + 4 * rows + rows * cstride) + 4


def shape_problem(fmt, shape):
    if len(shape) != 2:
        return f"{fmt} needs a shape [rows, cols], not {shape}"
    rows, cols = shape
    if rows < 1 or cols < 1:
        return f"shape {shape} is empty"
    if fmt == "q8_2f" and cols % 4:
        return f"cols {cols} is not a multiple of 4"
    if fmt == "q4tp" and cols % 32:
        return f"cols {cols} is not a multiple of 32"
    if fmt in GGML and cols % GGML[fmt][0]:
        return f"cols {cols} is not a multiple of {fmt}'s block of {GGML[fmt][0]}"
    return None


class Entry:
    def __init__(self, name, fmt, shape, crc, begin, end):
        self.name, self.fmt, self.shape, self.crc = name, fmt, shape, crc
        self.begin, self.end = begin, end

    @property
    def nbytes(self):
        return self.end - self.begin


class Nemo:
    """An opened .nemo: the header parsed and checked; data is read on demand."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if size < 8:
                raise NemoError(f"{path}: {size} bytes, shorter than the 8-byte header length")
            self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        self.size = size
        n = int.from_bytes(self.map[:8], "little")
        if n > size - 8:
            raise NemoError(f"{path}: header length {n}, but only {size - 8} bytes follow")
        try:
            header = json.loads(bytes(self.map[8:8 + n]).decode("utf-8"),
                                object_pairs_hook=_unique_object)
        except (UnicodeDecodeError, ValueError, NemoError) as e:
            raise NemoError(f"{path}: header: {e}")
        if not isinstance(header, dict):
            raise NemoError(f"{path}: header is not a JSON object")
        self.data_start = 8 + n
        meta = header.pop("__metadata__", None)
        if not isinstance(meta, dict) or "nemotron.format" not in meta:
            raise NemoError(f"{path}: no nemotron.format in __metadata__: not a .nemo")
        if meta["nemotron.format"] != "1":
            raise NemoError(f"{path}: nemotron.format {meta['nemotron.format']!r}; "
                            f"this reader knows format 1")
        self.meta = meta
        try:
            listed = json.loads(meta["nemotron.tensors"], object_pairs_hook=_unique_object)
        except KeyError:
            raise NemoError(f"{path}: __metadata__ has no nemotron.tensors")
        except (TypeError, ValueError, NemoError) as e:
            raise NemoError(f"{path}: nemotron.tensors: {e}")
        if not isinstance(listed, dict):
            raise NemoError(f"{path}: nemotron.tensors is not a JSON object")
        for name in header:
            if name not in listed:
                raise NemoError(f"{path}: tensor {name!r} is not listed in nemotron.tensors")
        for name in listed:
            if name not in header:
                raise NemoError(f"{path}: nemotron.tensors lists {name!r}, "
                                f"which the header does not hold")
        data_len = size - self.data_start
        self.entries = []
        for name, h in header.items():
            self.entries.append(self._entry(name, h, listed[name], data_len))
        # the data section is covered by the entries, in some order, without holes or overlaps
        spans = sorted((e.begin, e.end, e.name) for e in self.entries)
        at = 0
        for b, e, name in spans:
            if b != at:
                what = "overlaps the previous entry" if b < at else f"leaves a hole at {at}"
                raise NemoError(f"{path}: {name!r} at data offset {b} {what}")
            at = e
        if at != data_len:
            raise NemoError(f"{path}: {data_len - at} bytes of the data section "
                            f"belong to no entry")
        self.by_name = {e.name: e for e in self.entries}

    def _entry(self, name, h, t, data_len):
        p = f"{self.path}: {name!r}"
        try:
            dtype, stored, (b, e) = h["dtype"], h["shape"], h["data_offsets"]
            fmt, shape, crc = t["format"], t["shape"], t["crc32"]
        except (KeyError, TypeError, ValueError):
            raise NemoError(f"{p}: entry lacks dtype/shape/data_offsets or format/shape/crc32")
        if set(t) != {"format", "shape", "crc32"}:
            raise NemoError(f"{p}: unknown keys {sorted(set(t) - {'format', 'shape', 'crc32'})}")
        ints = lambda v: isinstance(v, list) and all(type(x) is int and x >= 0 for x in v)
        if not (ints(stored) and ints(shape) and ints([b, e]) and b <= e <= data_len):
            raise NemoError(f"{p}: bad shape or data_offsets {[b, e]} (data section {data_len})")
        if not (isinstance(crc, str) and len(crc) == 8 and all(c in "0123456789abcdef" for c in crc)):
            raise NemoError(f"{p}: crc32 {crc!r} is not 8 lowercase hex digits")
        if (fmt == "file") != name.startswith(FILE_PREFIX):
            raise NemoError(f"{p}: format {fmt!r} and the {FILE_PREFIX} prefix disagree")
        n = e - b
        if fmt in PACKED or fmt == "file":
            if dtype != "U8" or stored != [n]:
                raise NemoError(f"{p}: {fmt} stored as {dtype} {stored}, not U8 [{n}]")
            if fmt == "file":
                if shape != [n]:
                    raise NemoError(f"{p}: file shape {shape}, but {n} bytes stored")
            else:
                why = shape_problem(fmt, shape)
                if why:
                    raise NemoError(f"{p}: {why}")
                if payload_bytes(fmt, *shape) != n:
                    raise NemoError(f"{p}: {fmt} {shape} is {payload_bytes(fmt, *shape)} bytes, "
                                    f"{n} stored")
        elif fmt in PLAIN:
            if dtype != fmt or stored != shape:
                raise NemoError(f"{p}: listed {fmt} {shape}, stored {dtype} {stored}")
            if int(np.prod(shape, dtype=np.int64)) * PLAIN[fmt][1] != n:
                raise NemoError(f"{p}: {fmt} {shape} does not fill its {n} bytes")
        else:
            raise NemoError(f"{p}: unknown format {fmt!r}")
        return Entry(name, fmt, shape, crc, b, e)

    def raw(self, e):
        return memoryview(self.map)[self.data_start + e.begin:self.data_start + e.end]

    def crc(self, e):
        view, c = self.raw(e), 0
        for i in range(0, len(view), CRC_CHUNK):
            c = zlib.crc32(view[i:i + CRC_CHUNK], c)
        return "%08x" % c

    def get(self, name):
        e = self.by_name.get(name)
        if e is None:
            raise NemoError(f"{self.path}: no entry {name!r}")
        return e


# --- decoding (FORMATS.md) --------------------------------------------------------------------

def dequant_q8_2f(buf, rows, cols):
    """W[r][c] = rs[r] * q[r][c] * cs[c]: q int8 row-major at 0, rs f16 at rows*cols, cs f16 at
    rows*cols + 2*rows (cs may be at an odd f16 index; numpy reads it unaligned)."""
    q = np.frombuffer(buf, dtype=np.int8, count=rows * cols).reshape(rows, cols)
    rs = np.frombuffer(buf, dtype="<f2", count=rows, offset=rows * cols).astype(np.float32)
    cs = np.frombuffer(buf, dtype="<f2", count=cols, offset=rows * cols + 2 * rows).astype(np.float32)
    return (rs[:, None] * q.astype(np.float32)) * cs[None, :]


def q4tp_parts(buf, rows, cols):
    """Nibble values (rows x cols, -8..7), base and step (rows, f32) and codes (rows x gpr)."""
    gpr = cols // 32
    cstride = (gpr * 5 + 7) // 8
    # row r, group g: four u32 words at byte (r*gpr + g)*16; word j, bits [4n, 4n+4) hold
    # column 32g + 8j + n; the stored nibble is the value plus 8
    words = np.frombuffer(buf, dtype="<u4", count=rows * gpr * 4).reshape(rows, gpr, 4, 1)
    shifts = (4 * np.arange(8, dtype=np.uint32)).reshape(1, 1, 1, 8)
    nib = ((words >> shifts) & 15).astype(np.int32) - 8           # [r][g][j][n]
    nib = nib.reshape(rows, cols)                                # column 32g + 8j + n
    poff = rows * gpr * 16
    params = np.frombuffer(buf, dtype="<u4", count=rows, offset=poff)
    base = (params & 0xFFFF).astype(np.uint16).view("<f2").astype(np.float32)
    step = (params >> 16).astype(np.uint16).view("<f2").astype(np.float32)
    # group codes: 5 bits each, LSB first in the row's cstride bytes; code g = the LE u16 at
    # byte 5g >> 3, shifted right by 5g & 7, masked to 5 bits (the last read may take one
    # byte past the row: the payload's padding keeps it inside)
    coff = poff + 4 * rows
    codes_bytes = np.frombuffer(buf, dtype=np.uint8, count=rows * cstride + 1, offset=coff)
    g = np.arange(gpr)
    at = (np.arange(rows)[:, None] * cstride + (5 * g >> 3)[None, :])
    u16 = codes_bytes[at].astype(np.uint32) | (codes_bytes[at + 1].astype(np.uint32) << 8)
    codes = (u16 >> (5 * g & 7)[None, :]) & 31
    return nib, base, step, codes


def q4tp_scales(base, step, codes):
    """2^(base + code * step) per group. The exponent is clamped to [-126, 126] (NaN: -126) as
    the engine does (src/quant/quant.h, nt_q4tp_scale); the quantizer stays inside anyway."""
    t = base[:, None].astype(np.float64) + codes.astype(np.float64) * step[:, None]
    t = np.where(np.isnan(t), -126.0, np.clip(t, -126.0, 126.0))
    return np.exp2(t).astype(np.float32)


def dequant_q4tp(buf, rows, cols):
    nib, base, step, codes = q4tp_parts(buf, rows, cols)
    scale = np.repeat(q4tp_scales(base, step, codes), 32, axis=1)
    return scale * nib.astype(np.float32)


def decode(nemo, e):
    buf = nemo.raw(e)
    if e.fmt == "q8_2f":
        return dequant_q8_2f(buf, *e.shape)
    if e.fmt == "q4tp":
        return dequant_q4tp(buf, *e.shape)
    if e.fmt == "F32":
        return np.frombuffer(buf, dtype="<f4").astype(np.float32).reshape(e.shape)
    if e.fmt == "F16":
        return np.frombuffer(buf, dtype="<f2").astype(np.float32).reshape(e.shape)
    if e.fmt == "BF16":  # the top half of an f32
        return (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32).reshape(e.shape)
    if e.fmt in GGML:
        raise NemoError(f"{nemo.path}: {e.name!r} is in llama.cpp's block type {e.fmt[5:]}: this tool "
                        f"lists and verifies it but does not decode it (gguf-py's dequantize does)")
    raise NemoError(f"{nemo.path}: {e.name!r} is an embedded file, not a tensor (use `file`)")


# --- commands ---------------------------------------------------------------------------------

def cmd_list(nemo, args):
    width = max([len(e.name) for e in nemo.entries] + [4])
    print(f"{'name':<{width}}  {'format':<11}  {'shape':<20}  {'bytes':>12}  crc32")
    bad = 0
    for e in nemo.entries:
        got = nemo.crc(e)
        ok = got == e.crc
        bad += not ok
        status = e.crc + (" ok" if ok else f" BAD (data gives {got})")
        print(f"{e.name:<{width}}  {e.fmt:<11}  {str(e.shape):<20}  {e.nbytes:>12}  {status}")
    extra = {k: v for k, v in nemo.meta.items() if k != "nemotron.tensors"}
    print(f"# {len(nemo.entries)} entries, {nemo.size} bytes; metadata {json.dumps(extra)}")
    return 1 if bad else 0


def cmd_verify(nemo, args):
    bad = [(e, nemo.crc(e)) for e in nemo.entries]
    bad = [(e, got) for e, got in bad if got != e.crc]
    for e, got in bad:
        print(f"{nemo.path}: {e.name!r}: checksum mismatch: listed {e.crc}, data gives {got}",
              file=sys.stderr)
    if bad:
        return 1
    files = sum(e.fmt == "file" for e in nemo.entries)
    print(f"{nemo.path}: OK: {len(nemo.entries) - files} tensors, {files} files, "
          f"{nemo.size} bytes, every checksum verified")
    return 0


def cmd_show(nemo, args):
    e = nemo.get(args.name)
    got = nemo.crc(e)
    print(f"name     {e.name}\nformat   {e.fmt}\nshape    {e.shape}\nbytes    {e.nbytes} "
          f"at data offset {e.begin}\ncrc32    {e.crc} ({'ok' if got == e.crc else 'BAD: data gives ' + got})")
    if e.fmt == "file":
        print(f"text     {bytes(nemo.raw(e)[:200])!r}{' ...' if e.nbytes > 200 else ''}")
        return 0
    buf = nemo.raw(e)
    if e.fmt == "q8_2f":
        rows, cols = e.shape
        q = np.frombuffer(buf, dtype=np.int8, count=rows * cols)
        rs = np.frombuffer(buf, dtype="<f2", count=rows, offset=rows * cols).astype(np.float32)
        cs = np.frombuffer(buf, dtype="<f2", count=cols, offset=rows * cols + 2 * rows).astype(np.float32)
        print(f"q        min {q.min()} max {q.max()} mean |q| {np.abs(q.astype(np.float32)).mean():.3f}")
        print(f"rs       min {rs.min():.6g} max {rs.max():.6g}\ncs       min {cs.min():.6g} max {cs.max():.6g}")
    elif e.fmt == "q4tp":
        nib, base, step, codes = q4tp_parts(buf, *e.shape)
        hist = np.bincount((nib + 8).ravel(), minlength=16)
        print(f"base     min {base.min():.6g} max {base.max():.6g}\n"
              f"step     min {step.min():.6g} max {step.max():.6g}")
        print(f"codes    min {codes.min()} max {codes.max()}\nnibbles  {hist.tolist()} (counts of -8..7)")
    w = decode(nemo, e).astype(np.float64)
    if w.size:
        print(f"values   min {w.min():.6g} max {w.max():.6g} mean {w.mean():.6g} "
              f"std {w.std():.6g} rms {np.sqrt((w * w).mean()):.6g} zeros {int((w == 0).sum())}")
    return 0


def cmd_dequant(nemo, args):
    e = nemo.get(args.name)
    np.save(args.output, decode(nemo, e))
    return 0


def cmd_file(nemo, args):
    name = args.name if args.name.startswith(FILE_PREFIX) else FILE_PREFIX + args.name
    e = nemo.get(name)
    data = bytes(nemo.raw(e))
    if args.output:
        with open(args.output, "wb") as f:
            f.write(data)
    else:
        sys.stdout.buffer.write(data)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="nemo.py", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, help_ in [("list", "list every entry with its checksum status"),
                        ("verify", "check the structure and every checksum")]:
        sub.add_parser(name, help=help_).add_argument("file")
    p = sub.add_parser("show", help="one tensor's layout and value statistics")
    p.add_argument("file")
    p.add_argument("name")
    p = sub.add_parser("dequant", help="one tensor as an f32 .npy")
    p.add_argument("file")
    p.add_argument("name")
    p.add_argument("-o", "--output", required=True)
    p = sub.add_parser("file", help="an embedded file's bytes")
    p.add_argument("file")
    p.add_argument("name", help="e.g. config.json")
    p.add_argument("-o", "--output")
    args = ap.parse_args(argv)
    try:
        nemo = Nemo(args.file)
        return {"list": cmd_list, "verify": cmd_verify, "show": cmd_show,
                "dequant": cmd_dequant, "file": cmd_file}[args.cmd](nemo, args)
    except (NemoError, OSError) as e:
        print(f"nemo.py: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
