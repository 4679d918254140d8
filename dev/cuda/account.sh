#!/usr/bin/env bash
# account.sh - (device machine) one call's account of a decode step and a prompt's pass in place:
# dev/cuda/ab.sh on this tree's build (N, packed by dev/cuda/carry.sh) whole and with each kind of
# operation, and each of Nemotron-3-Nano's product shapes, left out of the replayed passes
# (NEMOTRON_CUDA_KNOCKOUT, src/cuda/pass.cu), then dev/cuda/account.py's table of what each costs.
# No checks (CHECKS=0: the outputs of a knock-out are wrong by design) and no operations alone.
#
#   OUT=... bash dev/cuda/account.sh          (ROUNDS=2 by default: ~4 - 5 minutes on an H100)
#
# The table and ab.sh's log go to $OUT (account.md, ab.log).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?OUT must name the folder that comes back}"
K=NEMOTRON_CUDA_KNOCKOUT
ko=(moe_experts matmul mamba_conv+mamba_scan+mamba_gated_norm add_rmsnorm+rmsnorm attention
    matmul:10304x2688 matmul:2688x4096 matmul:3712x2688+matmul:2688x3712 matmul:4096x2688+matmul:256x2688
    matmul:128x2688 matmul:131072x2688
    moe_experts+matmul+mamba_conv+mamba_scan+mamba_gated_norm+add_rmsnorm+rmsnorm+attention)
CHECKS=0 OPS_ROUNDS=0 ROUNDS=${ROUNDS:-2} bash dev/cuda/ab.sh "${ko[@]/#/N:$K=}" > /dev/null 2>&1
python3 dev/cuda/account.py "$OUT/ab.log" | tee "$OUT/account.md"
