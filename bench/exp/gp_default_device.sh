#!/bin/bash
# bench/exp/gp_default_device.sh BUILD -- fifty-second session, last
# device call: the gp row's winning cells as the default (one channel
# pair per P.V pass on sm_90 at D = 128: FP8PV fp32+fp16 without the mask,
# pvi8+splitv under it) under the GPU suite, compute-sanitizer memcheck
# and racecheck over `check --quick` at D = 128 for both modes, an A/B
# against ab/base (HEAD's templates; carry ab/, git-ignored) on those
# cells, then the D = 128 table beside SDPA-cuDNN in the same call.
# Caches warmed on the CPU machine: test_gpu, ab-base, ab-kernel_templates.
set -u
b=${1:?usage: bench/exp/gp_default_device.sh BUILD}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/ab"
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
OUT=$OUT bash bench/gpu_session.sh "$b" info test varlen faults
. "$(dirname "$0")/san_check.sh"
(
  export SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu
  for acc in fp32+fp16 pvi8+splitv; do
    san_check "$b" "$OUT" "mem-$acc" memcheck --head-dim 128 --family fp8pv --accum "$acc"
    san_check "$b" "$OUT" "race-$acc" racecheck --head-dim 128 --family fp8pv --accum "$acc"
  done
)
OUT=$OUT/ab CHECK="--quick --family fp8pv --head-dim 128 --accum fp32+fp16,pvi8+splitv" \
BENCH="--family fp8pv --head-dim 128 --accum fp32+fp16,pvi8+splitv --seq 1024,4096,16384 --causal 0,1 --iters 10 --warmup 3" \
ROUNDS=2 bench/ab_templates.sh "$b" ab/base kernel_templates 2>&1 | tee "$OUT/ab-gp-default.txt"
. "$(dirname "$0")/d128_table.sh"
d128_table "$b" "$OUT"
