#!/bin/bash
# bench/exp/tma_stages_device.sh BUILD -- fiftieth session: two stages
# against three for attn_mma's TMA tiles where they are new defaults (D = 32
# and 96; at D = 64 two stages had won by 1-3 % with cp.async) and for
# FP16PV fp32 at D = 128 (SAGEJIT_TUNE=stages=2; TMA stays on with two).
# Caches warmed on the CPU machine: ab-kernel_templates and
# ab-kernel_templates_stages-2 (D = 32, 96: FP16PV fp32, fp16+fp32, FP8PV
# fp32+fp32, pvi8+splitv; D = 128: FP16PV fp32).
set -u
b=${1:?usage: bench/exp/tma_stages_device.sh BUILD}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
for d in "32,96 fp16pv,fp8pv fp32,fp16+fp32,fp32+fp32,pvi8+splitv" "128 fp16pv fp32"; do
  set -- $d
  CHECK="--quick --family fp16pv,fp8pv --head-dim $1" \
  BENCH="--family $2 --head-dim $1 --accum $3 --seq 1024,4096,16384 --causal 0,1 --iters 10 --warmup 3" \
  ROUNDS=${ROUNDS:-2} OUT=$OUT/d${1%%,*} bench/ab_templates.sh "$b" kernel_templates kernel_templates@stages=2 2>&1 | tee "$OUT/ab-${1%%,*}.txt"
done
