#!/bin/bash
# bench/exp/mma_s4_device.sh BUILD -- forty-ninth session, one device call:
# (1) bench/exp/mma_probe.cu, the FP16PV step's tensor ceiling without the
# softmax (build-probe/mma_probe, built on the CPU machine with nvcc);
# (2) FP8PV at D = 128 with four TMA stages (SAGEJIT_TUNE=stages=4) against
# the default three, every mode the TMA table turns on, through
# bench/ab_templates.sh (caches warmed on the CPU machine:
# ab-kernel_templates and ab-kernel_templates_stages-4).
set -u
b=${1:?usage: bench/exp/mma_s4_device.sh BUILD}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/gpu.txt"
if [ -x build-probe/mma_probe ]; then
  build-probe/mma_probe 4096 2>&1 | tee "$OUT/mma_probe.txt"
fi
CHECK="--family fp8pv --head-dim 128 --dtype fp16 --accum fp32+fp16,fp32+fp32,pvi8,pvi8+splitv" \
BENCH="--family fp8pv --head-dim 128 --accum fp32+fp16,fp32+fp32,pvi8,pvi8+splitv --seq 1024,4096,16384 --causal 0,1 --iters 10 --warmup 3" \
ROUNDS=${ROUNDS:-2} OUT=$OUT bench/ab_templates.sh "$b" kernel_templates kernel_templates@stages=4 2>&1 | tee "$OUT/ab.txt"
