#!/bin/bash
# bench/exp/vh_default_device.sh BUILD -- fifty-third session, last device
# call: VH as the default (runtime/spec.c mma_vh: FP8PV's e4m3 P.V as fp16
# mma on sm_90 with V converted once per CTA and tile) under the GPU suite,
# compute-sanitizer memcheck and racecheck over `check --quick` in VH cells
# (D = 128 fp32+fp32 and fp32, D = 96 fp32+fp16), then the D = 128 table
# beside SDPA-cuDNN in the same call.  Cache warmed on the CPU machine:
# test_gpu.
set -u
b=${1:?usage: bench/exp/vh_default_device.sh BUILD}
OUT=${OUT:-/tmp/out}
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
OUT=$OUT bash bench/gpu_session.sh "$b" info test varlen faults
. "$(dirname "$0")/san_check.sh"
export SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu
for c in "128 fp32+fp32,fp32" "96 fp32+fp16"; do
  set -- $c
  san_check "$b" "$OUT" "mem-$1-$2" memcheck --head-dim "$1" --family fp8pv --accum "$2"
  san_check "$b" "$OUT" "race-$1-$2" racecheck --head-dim "$1" --family fp8pv --accum "$2"
done
. "$(dirname "$0")/d128_table.sh"
d128_table "$b" "$OUT"
