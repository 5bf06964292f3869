#!/bin/bash
# bench/exp/tma96_default_device.sh BUILD -- fiftieth session, one device
# call: attn_mma's TMA tiles as the D = 96 default on sm_90 (runtime/spec.c
# mma_tma) under the GPU suite (test_gpu, test_gpu_varlen, test_gpu_faults;
# the test_gpu cache warmed on the CPU machine) and compute-sanitizer
# memcheck and racecheck over `check --quick --head-dim 96` of every mode
# that now takes it; then the D = 32 form forced with SAGEJIT_TUNE=tma=1
# against cp.async (bench/exp/mma_tma_dim_device.sh BUILD 32).
set -u
b=${1:?usage: bench/exp/tma96_default_device.sh BUILD}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
OUT=$OUT bash bench/gpu_session.sh "$b" info test varlen faults
. "$(dirname "$0")/san_check.sh"
export SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu
san_check "$b" "$OUT" mem-fp16pv memcheck --head-dim 96 --family fp16pv --accum fp32,fp16+fp32
san_check "$b" "$OUT" mem-fp8pv memcheck --head-dim 96 --family fp8pv --accum fp32+fp16,fp32+fp32,pvi8,pvi8+splitv
san_check "$b" "$OUT" race-fp16pv racecheck --head-dim 96 --family fp16pv
san_check "$b" "$OUT" race-fp8pv racecheck --head-dim 96 --family fp8pv
unset SAGEJIT_CACHE_DIR
OUT=$OUT bash bench/exp/mma_tma_dim_device.sh "$b" 32
