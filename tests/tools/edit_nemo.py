#!/usr/bin/env python3
"""edit_nemo.py - a .nemo with one entry of nemotron.tensors changed, for the tests of the
reader's refusals (docs/NEMO.md has the layout).

usage: edit_nemo.py IN OUT FORMAT EDIT
  FORMAT  the format tag of the entry to change: the first entry in file order that has it
  EDIT    format=TAG   give it another format tag
          rows+N       add N to its logical rows (the stored bytes no longer match)
          cols+N       add N to its logical columns
Prints the entry's name. The header is written again (padded to 64 bytes as the writer pads
it); the data section and every checksum are left as they were, so only the edit is wrong.
Standard library only.
"""
import json
import struct
import sys


def main():
    src, dst, fmt, edit = sys.argv[1:5]
    b = open(src, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    header = json.loads(b[8:8 + n])
    meta = header['__metadata__']
    tensors = json.loads(meta['nemotron.tensors'])
    order = sorted((v['data_offsets'][0], k) for k, v in header.items() if k != '__metadata__')
    name = next((k for _, k in order if tensors[k]['format'] == fmt), None)
    if name is None:
        sys.exit(f'{src}: no entry of format {fmt}')
    entry = tensors[name]
    if edit.startswith('format='):
        entry['format'] = edit[len('format='):]
    elif edit.startswith('rows+'):
        entry['shape'][0] += int(edit[len('rows+'):])
    elif edit.startswith('cols+'):
        entry['shape'][-1] += int(edit[len('cols+'):])
    else:
        sys.exit(f'unknown edit {edit}')
    meta['nemotron.tensors'] = json.dumps(tensors, separators=(',', ':'))
    text = json.dumps(header, separators=(',', ':')).encode()
    text += b' ' * (-(8 + len(text)) % 64)
    with open(dst, 'wb') as f:
        f.write(struct.pack('<Q', len(text)) + text + b[8 + n:])
    print(name)


if __name__ == '__main__':
    main()
