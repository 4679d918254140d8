#!/usr/bin/env bash
# quickstart.sh - the README's first command: set up, build, and run the engine's main job on the
# bundled default model (greedy generation on the CPU), ending with its speed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
make -s cpu
model=tests/fixtures/hybrid-group-f32
echo
echo "== nemotron generate on $model (a tiny random Nemotron-H with every block kind; the"
echo "   trained demo model replaces it when it lands) =="
build/nemotron generate -m "$model" --tokens 17,42,256,3,99,180,7,311 -n 32 --ignore-eos
