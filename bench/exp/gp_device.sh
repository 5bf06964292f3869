#!/bin/bash
# bench/exp/gp_device.sh BUILD -- fifty-second session: attn_mma's P.V
# channel group in the two-level modes (PvGroup's TARGET for 32-row warps:
# 2 n-tile pairs per pass, the default, against 1 and 4; ab/gp1, ab/gp4,
# copies of ab/base with that one constant changed), D = 128, FP8PV
# fp32+fp16, fp32+fp32, pvi8+splitv and FP16PV fp16+fp32.  ptxas -v
# sm_90a non-causal spills (stores / loads): fp32+fp16 148 / 152 -> gp1
# 124 / 128, gp4 136 / 140; fp32+fp32 196 / 200 all three; pvi8+splitv
# 220 / 288 -> 112 / 180, 668 / 704; FP16PV fp16+fp32 100 / 96 -> 64 / 68,
# 4 / 8.  ab/ is git-ignored: carry it.  Caches warmed on the CPU
# machine: ab-base, ab-gp1, ab-gp4.
set -u
b=${1:?usage: bench/exp/gp_device.sh BUILD}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
CHECK="--quick --family fp8pv,fp16pv --head-dim 128 --accum fp32+fp16,fp32+fp32,pvi8+splitv,fp16+fp32" \
BENCH="--family fp8pv,fp16pv --head-dim 128 --accum fp32+fp16,fp32+fp32,pvi8+splitv,fp16+fp32 --seq 1024,4096,16384 --causal 0,1 --iters 10 --warmup 3" \
ROUNDS=${ROUNDS:-2} bench/ab_templates.sh "$b" ab/base ab/gp1 ab/gp4 2>&1 | tee "$OUT/ab-gp.txt"
