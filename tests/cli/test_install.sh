#!/usr/bin/env bash
# test_install.sh - `make install PREFIX=...` into a temporary prefix, then a client program
# (tests/install/greedy.c) built against the installed copy with nothing but
# `pkg-config --cflags --libs nemotron`:
#   - the prefix holds include/nemotron.h, lib/libnemotron.a, lib/libnemotron.so ->
#     libnemotron.so.0 -> libnemotron.so.0.1.0 (the soname libnemotron.so.0), lib/pkgconfig/
#     nemotron.pc and bin/nemotron;
#   - the shared library exports the public API only (no nt_* symbol);
#   - the program, linked to the shared library, prints the greedy ids `nemotron generate` prints
#     for the same prompt on the bundled demo model, and the library's version;
#   - linked to the static archive with `pkg-config --static` (its Libs.private: CUDA runtime when
#     built, json-c, PCRE2, zlib, OpenMP, libstdc++), it prints the same;
#   - the installed nemotron command runs.
# The install is of the release build: under the ASan build (tests/run.sh build/asan) the script
# says it does not apply and passes nothing.
# usage (from the repository root): bash tests/cli/test_install.sh build/nemotron
suite=install
. "$(dirname "$0")/checks.sh"
if [ "$(dirname "$bin")" != build ]; then
    printf '%-28s not run: it installs the release build (build/), not %s\n' install "$(dirname "$bin")"
    exit 0
fi
prefix=$work/prefix
# make's own variables of the calling make (test runs inside `make test`) must not leak in
if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s install PREFIX="$prefix" >"$work/make.log" 2>&1; then
    check "make install: $(tail -5 "$work/make.log")" false
    printf '%-28s %d checks, %d failed\n' install "$checks" "$failed"
    exit 1
fi
for f in include/nemotron.h lib/libnemotron.a lib/libnemotron.so.0.1.0 lib/pkgconfig/nemotron.pc bin/nemotron; do
    check "installed $f" test -f "$prefix/$f"
done
check "libnemotron.so -> libnemotron.so.0" test "$(readlink "$prefix/lib/libnemotron.so")" = libnemotron.so.0
check "libnemotron.so.0 -> libnemotron.so.0.1.0" test "$(readlink "$prefix/lib/libnemotron.so.0")" = libnemotron.so.0.1.0
soname=$(objdump -p "$prefix/lib/libnemotron.so.0.1.0" 2>/dev/null | awk '$1 == "SONAME" {print $2}')
check "the soname is libnemotron.so.0: '$soname'" test "$soname" = libnemotron.so.0
exported=$(nm -D --defined-only "$prefix/lib/libnemotron.so.0.1.0" | awk '$2 ~ /^[TDBR]$/ {print $3}')
check "the shared library exports nemotron_model_load" grep -qx nemotron_model_load <<<"$exported"
check "the shared library exports no nt_* symbol: $(grep -m3 '^nt_' <<<"$exported" | tr '\n' ' ')" \
    test -z "$(grep '^nt_' <<<"$exported")"

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
want=$("$bin" generate -m "$model" --tokens 1170,278,3 -n 6 --ignore-eos 2>/dev/null)
# shellcheck disable=SC2046
if cc -std=c11 tests/install/greedy.c -o "$work/greedy" $(pkg-config --cflags --libs nemotron) 2>"$work/cc.log"; then
    got=$(LD_LIBRARY_PATH=$prefix/lib "$work/greedy" "$model" 6 1170 278 3 2>&1)
    check "the shared-library client prints generate's ids: '$got' vs '$want'" test -n "$want" -a "$(head -1 <<<"$got")" = "$want"
    check "the client reports the version 0.1.0" grep -qx "version 0.1.0" <<<"$got"
    check "the client loads the installed libnemotron.so.0" \
        grep -q "$prefix/lib/libnemotron.so.0" <(LD_LIBRARY_PATH=$prefix/lib ldd "$work/greedy")
else
    check "building against the shared library: $(head -c 600 "$work/cc.log")" false
fi
# the static archive alone: a copy of the prefix without the shared library
static=$work/static
cp -r "$prefix" "$static"
rm -f "$static"/lib/libnemotron.so*
# shellcheck disable=SC2046
if cc -std=c11 tests/install/greedy.c -o "$work/greedy_static" \
    $(pkg-config --define-variable=prefix="$static" --define-variable=libdir="$static/lib" --static --cflags --libs nemotron) \
    2>"$work/cc.log"; then
    got=$("$work/greedy_static" "$model" 6 1170 278 3 2>&1)
    check "the static client prints generate's ids: '$got'" test "$(head -1 <<<"$got")" = "$want"
    check "the static client needs no libnemotron.so" test -z "$(ldd "$work/greedy_static" | grep libnemotron)"
else
    check "building against the static archive with pkg-config --static: $(head -c 600 "$work/cc.log")" false
fi
check "the installed nemotron runs" grep -q "^nemotron 0.1.0$" <("$prefix/bin/nemotron" version)

checks_summary
