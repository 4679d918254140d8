"""elfsec.py CUBIN [OUTDIR]: lists the sections of a 64-bit ELF cubin, or writes its kernels' .text,
.nv.constant0 and line-table sections to OUTDIR (binutils' objcopy does not take the CUDA machine type)."""
import struct, sys
def sections(path):
    d = open(path, 'rb').read()
    shoff, = struct.unpack_from('<Q', d, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', d, 0x3A)
    secs = []
    for i in range(shnum):
        name, typ, flags, addr, off, size, link, info, align, entsize = struct.unpack_from('<IIQQQQIIQQ', d, shoff + i * shentsize)
        secs.append([name, typ, off, size, info])
    _, _, stroff, strsize, _ = secs[shstrndx]
    out = {}
    for s in secs:
        n = d[stroff + s[0]: d.index(b'\0', stroff + s[0])].decode()
        out[n] = d[s[2]: s[2] + s[3]] if s[1] != 8 else b''
    return out
if __name__ == '__main__':
    secs = sections(sys.argv[1])
    if len(sys.argv) > 2:
        import os
        os.makedirs(sys.argv[2], exist_ok=True)
        for n, b in secs.items():
            if n.startswith('.text.') or n.startswith('.nv.constant0.') or 'debug_line' in n:
                open(os.path.join(sys.argv[2], n.lstrip('.')), 'wb').write(b)
    else:
        for n, b in secs.items(): print(n, len(b))
