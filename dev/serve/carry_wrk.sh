#!/usr/bin/env bash
# carry_wrk.sh - Debian's wrk and the shared libraries a bare host may lack, into build/vcarry/wrk/,
# for dev/serve/serve_bench.sh on a machine without network or packages.
#
#   apt-get install -y wrk      # here, once
#   dev/serve/carry_wrk.sh      # then carry build/vcarry/wrk (about 6 MB)
#
# Copies /usr/bin/wrk and every library ldd lists for it except the C and C++ runtimes (libc, libm,
# libpthread, libdl, librt, the loader, libgcc_s, libstdc++: a host's must stay its own, and any
# host that runs build/nemotron has them; `make gpu-bundle` leaves out the same) and the vDSO. serve_bench.sh runs build/vcarry/wrk/wrk with
# LD_LIBRARY_PATH=build/vcarry/wrk.
set -euo pipefail
cd "$(dirname "$0")/../.."
src=${WRK:-/usr/bin/wrk}
out=build/vcarry/wrk
[ -x "$src" ] || { echo "carry_wrk.sh: no $src (apt-get install -y wrk)" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"
cp "$src" "$out/wrk"
ldd "$src" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | while read -r name path; do
    case $name in
    libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libgcc_s.so.* | libstdc++.so.* | ld-linux*) continue ;;
    esac
    cp -L "$path" "$out/$name"
done
# the copy must run with its own folder's libraries (wrk -v exits 1 after its banner): the same
# check serve_bench.sh makes
banner=$(LD_LIBRARY_PATH=$PWD/$out "$out/wrk" -v 2>&1 || true)
[[ $banner == wrk* ]] || { echo "carry_wrk.sh: $out/wrk does not run: $banner" >&2; exit 1; }
echo "carry_wrk.sh: $out: $(ls "$out" | tr '\n' ' ')($(du -sh "$out" | cut -f1))"
