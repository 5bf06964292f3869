#!/bin/bash
# bench/exp/tma32_default_device.sh BUILD -- fiftieth session, second device
# call: attn_mma's TMA tiles as the D = 32 default on sm_90 (the tma32 cells
# of runtime/spec.c mma_tma) under the GPU suite and compute-sanitizer
# memcheck / racecheck over `check --quick --head-dim 32` of the modes that
# take it; then the D = 128 table of issues 3 and 4 (sagejit bench, every
# family's modes of the anchors) beside SDPA-cuDNN in the same call.
set -u
b=${1:?usage: bench/exp/tma32_default_device.sh BUILD}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
OUT=$OUT bash bench/gpu_session.sh "$b" info test varlen faults
. "$(dirname "$0")/san_check.sh"
export SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu
san_check "$b" "$OUT" mem-fp16pv memcheck --head-dim 32 --family fp16pv --accum fp16+fp32
san_check "$b" "$OUT" mem-fp8pv memcheck --head-dim 32 --family fp8pv --accum fp32,fp32+fp32,pvi8,pvi8+splitv
san_check "$b" "$OUT" race-fp16pv racecheck --head-dim 32 --family fp16pv --accum fp16+fp32
san_check "$b" "$OUT" race-fp8pv racecheck --head-dim 32 --family fp8pv --accum fp32+fp32,pvi8+splitv
. "$(dirname "$0")/d128_table.sh"
d128_table "$b" "$OUT"
