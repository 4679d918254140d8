#!/usr/bin/env bash
# bench_cpu.sh - the CPU benchmark recorded in docs/PERF.md: writes the synthetic bench-300m
# model (random bf16 weights, every block kind; tests/support/synth.c) once, then runs
# `nemotron bench` on it. Extra arguments go to nemotron bench (e.g. -t 1, --json).
# usage: tools/bench_cpu.sh [BUILD_DIR] [bench options...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
model=$build/models/bench-300m-bf16
if [ ! -f "$model/config.json" ]; then
    mkdir -p "$model"
    "$build/make_model" "$model" --shape bench-300m --dtype bf16
fi
"$build/nemotron" bench -m "$model" -p 512 -n 128 -r 3 "$@"
