#!/bin/bash
# bench/exp/er96_device.sh BUILD -- fifty-first session: the er128 row's
# early O rescale at D = 96 (non-causal; causal D = 96 runs the chunked
# step, which rescales first anyway) and D = 256 (both ways), FP16PV fp32
# with TMA tiles: bench/exp/er96.patch applied to kernel_templates and
# built into BUILD; A/B against ab/base (a copy of the templates without
# it; carry it, git-ignored), then the GPU suite and memcheck over `check
# --quick` at D = 96 and 256 on BUILD.  Written in the fifty-first
# session; its A/B ran in the fifty-second (bench/exp/s52_device.sh):
# D = 96 within noise, D = 256 -1 % without the mask, so the patch was not
# merged (bench/NOTES.md, er96).  ptxas -v sm_90a: no spills either way.
# Caches warmed on the CPU machine: test_gpu, ab-base, ab-kernel_templates.
set -u
b=${1:?usage: bench/exp/er96_device.sh BUILD}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
CHECK="--quick --family fp16pv --head-dim 96,256 --accum fp32" \
BENCH="--family fp16pv --head-dim 96,256 --accum fp32 --seq 1024,4096 --causal 0,1 --iters 10 --warmup 3" \
ROUNDS=${ROUNDS:-2} bench/ab_templates.sh "$b" ab/base kernel_templates 2>&1 | tee "$OUT/ab-er96.txt"
OUT=$OUT bash bench/gpu_session.sh "$b" test varlen faults
. "$(dirname "$0")/san_check.sh"
export SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu
san_check "$b" "$OUT" mem-fp16pv memcheck --head-dim 96 --family fp16pv --accum fp32
san_check "$b" "$OUT" mem-fp16pv-256 memcheck --head-dim 256 --family fp16pv --accum fp32
