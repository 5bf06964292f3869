#!/bin/bash
# bench/exp/tma128_st2_device.sh BUILD -- fifty-first session: attn_mma's
# TMA tiles in two stages at D = 128 (SAGEJIT_TUNE=stages=2,tma=1) against
# the default (three stages; TMA where mma_tma says so, else cp.async).
# The fiftieth session's st2 row could not measure this: with stages=2
# alone mma_tma turns TMA off at D = 128, so it compared cp.async in two
# stages with TMA in three.  Where two stages won at D = 32 and 96 it was
# under the causal mask (+1-5 %).
# Caches warmed on the CPU machine: ab-kernel_templates and
# ab-kernel_templates_stages-2-tma-1 (D = 128, fp16, FP16PV fp32 and
# fp16+fp32, FP8PV fp32+fp16, fp32+fp32, pvi8+splitv, causal both ways).
set -u
b=${1:?usage: bench/exp/tma128_st2_device.sh BUILD}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
CHECK="--quick --family fp16pv,fp8pv --head-dim 128 --accum fp32,fp16+fp32,fp32+fp16,fp32+fp32,pvi8+splitv" \
BENCH="--family fp16pv,fp8pv --head-dim 128 --accum fp32,fp16+fp32,fp32+fp16,fp32+fp32,pvi8+splitv --seq 1024,4096,16384 --causal 0,1 --iters 10 --warmup 3" \
ROUNDS=${ROUNDS:-2} bench/ab_templates.sh "$b" kernel_templates kernel_templates@stages=2,tma=1 2>&1 | tee "$OUT/ab-128.txt"
