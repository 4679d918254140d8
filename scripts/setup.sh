#!/usr/bin/env bash
# setup.sh - installs what nemotron.c needs to build and test on Debian 12: C and C++ compilers, make,
# pkg-config, json-c (libjson-c-dev), PCRE2 (libpcre2-dev), zlib (zlib1g-dev: .nemo checksums),
# libedit (libedit-dev: chat's line editing and history on a terminal),
# xz (a compressed test fixture), python3 (a test reads a JSON fixture with it) and numpy
# (python3-numpy: tools/nemo.py and the tests that use it), libmicrohttpd (libmicrohttpd-dev: the
# HTTP server of `nemotron serve`), curl, nodejs and npm with the pinned openai package
# (tests/openai: the server's tests). Installs only what is missing; uses
# sudo when not root. Safe to run again.
set -euo pipefail
need=()
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v c++ >/dev/null 2>&1 || need+=(g++)     # the C++ header check, the CUDA emulation test
command -v make >/dev/null 2>&1 || need+=(make)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
dpkg -s libjson-c-dev >/dev/null 2>&1 || need+=(libjson-c-dev)
dpkg -s libpcre2-dev >/dev/null 2>&1 || need+=(libpcre2-dev)
dpkg -s zlib1g-dev >/dev/null 2>&1 || need+=(zlib1g-dev)           # CRC-32 of .nemo files
dpkg -s libedit-dev >/dev/null 2>&1 || need+=(libedit-dev)         # chat's line editing
dpkg -s libmicrohttpd-dev >/dev/null 2>&1 || need+=(libmicrohttpd-dev)   # nemotron serve
command -v curl >/dev/null 2>&1 || need+=(curl)       # tests/cli/test_serve.sh drives the server
command -v node >/dev/null 2>&1 || need+=(nodejs)     # the openai npm package drives it too
command -v npm >/dev/null 2>&1 || need+=(npm)
# the openai package at the version tests/openai/package-lock.json pins (needs the registry once)
install_openai() {
    [ -f tests/openai/node_modules/openai/package.json ] && return 0
    echo "setup: installing the openai npm package (tests/openai)"
    npm ci --prefix tests/openai --no-audit --no-fund >/dev/null
}
cd "$(dirname "$0")/.."
command -v xz >/dev/null 2>&1 || need+=(xz-utils)
command -v python3 >/dev/null 2>&1 || need+=(python3)   # tests/cli/test_text_cli.sh reads a fixture
dpkg -s python3-numpy >/dev/null 2>&1 || need+=(python3-numpy)   # tools/nemo.py and its test
if [ ${#need[@]} -eq 0 ]; then
    install_openai
    echo "setup: everything needed is installed"
    exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "setup: installing ${need[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
install_openai
echo "setup: done"
