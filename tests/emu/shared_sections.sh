#!/bin/sh
# shared_sections.sh - moves the __shared__ variables of an emulated object into the section
# emu_shared, so the linker gathers every kernel's shared memory into one range (bounded by
# __start_emu_shared and __stop_emu_shared) that tests/emu/cuda_emu.cc poisons before each block
# and the pointer checks allow.
#
# usage: tests/emu/shared_sections.sh OBJECT   (rewrites OBJECT in place)
#
# cuda_emu.h declares __shared__ as `static __attribute__((retain))`: gcc puts each such variable
# in a .bss.* section of its own marked R (SHF_GNU_RETAIN), the one mark that survives in the
# statics of templates (gcc 12 drops a section attribute there), and nothing else in the
# emulated code uses it. ld's INPUT_SECTION_FLAGS cannot match that flag (binutils 2.40), so
# the sections are renamed here.
set -eu
obj=$1
# on any failure the object goes: make then compiles it again rather than link one whose shared
# memory would never be poisoned
trap 'rm -f "$obj"' EXIT
sections=$(readelf -SW "$obj")
# each line: [Nr] Name Type Address Off Size ES Flg Lk Inf Al; Flg holds R for SHF_GNU_RETAIN
renames=$(printf '%s\n' "$sections" | sed 's/^ *\[ *[0-9]*\] //' |
    awk '$1 ~ /^\.bss\./ && $7 ~ /R/ { print "--rename-section " $1 "=emu_shared" }')
[ -z "$renames" ] || objcopy $renames "$obj"
trap - EXIT
