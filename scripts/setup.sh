#!/usr/bin/env bash
# setup.sh - installs what nemotron.c needs to build and test on Debian 12: a C compiler, make,
# pkg-config and json-c (Debian's libjson-c-dev). Installs only what is missing; uses sudo when
# not root. Safe to run again.
set -euo pipefail
need=()
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v make >/dev/null 2>&1 || need+=(make)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
dpkg -s libjson-c-dev >/dev/null 2>&1 || need+=(libjson-c-dev)
if [ ${#need[@]} -eq 0 ]; then
    echo "setup: everything needed is installed"
    exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "setup: installing ${need[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
echo "setup: done"
