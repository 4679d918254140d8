#!/usr/bin/env bash
# quickstart.sh - the README's first command: set up, build, and run the engine's main job on the
# bundled model: models/nemotron-h-kjv (a 7.3 M-parameter Nemotron-H trained on the King James
# Bible) continues a prompt on the CPU, streaming text, then reports its speed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
make -s cpu
echo
build/nemotron run -m models/nemotron-h-kjv -p "And it came to pass, when the king" -n 96 \
    --temp 0.7 --top-p 0.95 --seed 42
