#!/bin/bash
# bench/exp/st2_default_device.sh BUILD -- fiftieth session, last device
# call: two K/V stages for causal calls at D = 32 and 96 on sm_90
# (runtime/spec.c, the st2 row) under the GPU suite and compute-sanitizer
# memcheck / racecheck over `check --quick` at D = 32 and 96 (causal both
# ways), both families' modes that change.
set -u
b=${1:?usage: bench/exp/st2_default_device.sh BUILD}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
OUT=$OUT bash bench/gpu_session.sh "$b" test varlen faults
. "$(dirname "$0")/san_check.sh"
export SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu
san_check "$b" "$OUT" mem-96 memcheck --head-dim 96 --family fp16pv,fp8pv --accum fp32,fp16+fp32,pvi8+splitv
san_check "$b" "$OUT" mem-32 memcheck --head-dim 32 --family fp16pv,fp8pv --accum fp32,fp32+fp32,pvi8+splitv
san_check "$b" "$OUT" race-96 racecheck --head-dim 96 --family fp16pv,fp8pv
san_check "$b" "$OUT" race-32 racecheck --head-dim 32 --family fp16pv,fp8pv
