#!/bin/bash
# bench/exp/mma_tma_dim_device.sh BUILD D -- forty-ninth session, one device
# call: attn_mma's TMA tiles at head dim D (256: K in two 128-byte boxes per
# tile; 96: K in three 32-byte boxes, FP16 V in 32-channel boxes), forced
# with SAGEJIT_TUNE=tma=1, against the cp.async form (the default there
# when measured): `sagejit check` of every mode at D with the knob, then
# bench/ab_templates.sh, both families, D, causal both ways.
# Caches warmed on the CPU machine: ab-kernel_templates (no tune) and
# ab-kernel_templates_tma-1 (SAGEJIT_TUNE=tma=1), --head-dim D.
set -u
b=${1:?usage: bench/exp/mma_tma_dim_device.sh BUILD D}
d=${2:?usage: bench/exp/mma_tma_dim_device.sh BUILD D}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
for fam in "fp16pv --accum fp32,fp16+fp32" "fp8pv --accum fp32,fp32+fp16,fp32+fp32,pvi8,pvi8+splitv"; do
  # shellcheck disable=SC2086
  SAGEJIT_TUNE=tma=1 SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/ab-kernel_templates_tma-1 timeout 240 \
    "$b/sagejit" check --family $fam --head-dim "$d" --dtype fp16 > "$OUT/check-${fam%% *}.log" 2>&1
  echo "check ${fam%% *} tma=1: rc=$? $(tail -1 "$OUT/check-${fam%% *}.log")"
done
CHECK="--quick --family fp16pv --head-dim $d" \
BENCH="--family fp16pv,fp8pv --head-dim $d --accum fp32,fp16+fp32,fp32+fp16,fp32+fp32,pvi8,pvi8+splitv --seq 1024,4096,16384 --causal 0,1 --iters 10 --warmup 3" \
ROUNDS=${ROUNDS:-2} OUT=$OUT bench/ab_templates.sh "$b" kernel_templates kernel_templates@tma=1 2>&1 | tee "$OUT/ab.txt"
