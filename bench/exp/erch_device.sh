#!/bin/bash
# bench/exp/erch_device.sh BUILD -- fifty-first session, after the st128
# row: attn_mma at D = 128 with its TMA tiles, two template constants and a
# knob re-measured on the shipped plans.
#   ab/erch: a copy of kernel_templates with EARLY_RESCALE also without
#     the mask (m10: -1 % with 60 / 112 bytes of spills under cp.async;
#     now 20 / 36) and CHUNKED also at causal D = 128 (m12: -1.5 to -2.8 %
#     under cp.async; now 24 / 36 bytes against the default's 28 / 40):
#     FP16PV fp32 only, the first in its non-causal cells, the second in
#     its causal ones.
#   kernel_templates@ksub=32: 32-key steps (FP8PV fp32+fp16 spills 148 /
#     152 bytes with 64-key steps, 24 / 60 with 32).
# Then compute-sanitizer racecheck over `check --quick` at D = 128 on the
# shipped plans (the st128 stage rule: FP16PV fp32, fp16+fp32, FP8PV
# pvi8+splitv causal in two TMA stages).
# Caches warmed on the CPU machine: test_gpu, ab-kernel_templates, ab-erch,
# ab-kernel_templates_ksub-32.  Carry ab/erch (git-ignored).
set -u
b=${1:?usage: bench/exp/erch_device.sh BUILD}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
CHECK="--quick --family fp16pv,fp8pv --head-dim 128 --accum fp32,fp32+fp16" \
BENCH="--family fp16pv,fp8pv --head-dim 128 --accum fp32,fp32+fp16 --seq 1024,4096,16384 --causal 0,1 --iters 10 --warmup 3" \
ROUNDS=${ROUNDS:-2} bench/ab_templates.sh "$b" kernel_templates ab/erch kernel_templates@ksub=32 2>&1 | tee "$OUT/ab-erch.txt"
. "$(dirname "$0")/san_check.sh"
export SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu
san_check "$b" "$OUT" race-fp16pv racecheck --head-dim 128 --family fp16pv --accum fp32,fp16+fp32
san_check "$b" "$OUT" race-fp8pv racecheck --head-dim 128 --family fp8pv --accum pvi8+splitv
