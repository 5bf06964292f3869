#!/bin/bash
# bench/exp/s58c_device.sh BUILD -- written in the fifty-eighth session,
# which could not start a machine for it (NOT RUN yet).  (A) the GPU suite
# on BUILD (BUILD/test-cache/test_gpu warmed for its templates), which
# covers the c8 form (CHUNKED for FP8PV's fp32 mode) and its new
# test_max_jumps cases; (B) while the call has time, ab/hf against ab/base
# at FP8PV fp32+fp16 D = 128 (both masks) and FP16PV fp16+fp32 D = 128:
# ab/base is a copy of kernel_templates/, ab/hf the same with
# bench/exp/s58_hf.patch applied (HFOLD: the fp16 tile accumulators folded
# into O on the tensor core), both warmed into BUILD/test-cache/ab-NAME;
# (C) compute-sanitizer memcheck over `check --quick` of FP8PV's fp32 mode
# at D = 128; (D) while the call has time, ab/c8x (CHUNKED for that mode at
# every VH head dim: kernel_templates/ with the gate's `D == 128` dropped)
# against ab/base at D = 64, 96 and 256.  STEPS overrides the suite's
# steps, LIMIT the call's seconds.  Verdicts print last.
set -u
b=${1:?usage: bench/exp/s58c_device.sh BUILD}
OUT=${OUT:-/tmp/out}
LIMIT=${LIMIT:-450}
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
mkdir -p "$OUT/a1" "$OUT/a2"
# shellcheck disable=SC2086
OUT=$OUT bash bench/gpu_session.sh "$b" ${STEPS:-test varlen faults} > "$OUT/suite.txt" 2>&1
echo "suite done at ${SECONDS} s"
if [ "$SECONDS" -lt $((LIMIT - 130)) ]; then
  OUT=$OUT/a1 CHECK="--quick --family fp8pv --head-dim 128 --accum fp32+fp16" \
  BENCH="--family fp8pv --head-dim 128 --accum fp32+fp16 --quant per_thread --dtype fp16 --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
  ROUNDS=2 timeout 120 bench/ab_templates.sh "$b" ab/base ab/hf > "$OUT/ab-a1.txt" 2>&1
fi
if [ "$SECONDS" -lt $((LIMIT - 70)) ]; then
  OUT=$OUT/a2 CHECK="--quick --family fp16pv --head-dim 128 --accum fp16+fp32" \
  BENCH="--family fp16pv --head-dim 128 --accum fp16+fp32 --quant per_thread --dtype fp16 --seq 1024,4096,16384 --causal 0 --iters 20 --warmup 5" \
  ROUNDS=2 timeout 60 bench/ab_templates.sh "$b" ab/base ab/hf > "$OUT/ab-a2.txt" 2>&1
fi
. "$(dirname "$0")/san_check.sh"
{
  if [ "$SECONDS" -lt $((LIMIT - 40)) ]; then
    SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu san_check "$b" "$OUT" mem8 memcheck \
      --family fp8pv --head-dim 128 --accum fp32
  else
    echo "sanitizers: skipped at ${SECONDS} s"
  fi
} > "$OUT/san.txt" 2>&1
if [ "$SECONDS" -lt $((LIMIT - 120)) ]; then
  mkdir -p "$OUT/a3"
  OUT=$OUT/a3 CHECK="--quick --family fp8pv --head-dim 64,96,256 --accum fp32" \
  BENCH="--family fp8pv --head-dim 64,96,256 --accum fp32 --quant per_thread --dtype fp16 --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
  ROUNDS=2 timeout 110 bench/ab_templates.sh "$b" ab/base ab/c8x > "$OUT/ab-a3.txt" 2>&1
fi
echo "=== verdicts"
grep -E "rc=|cases|PASSED|FAILED|^\[  FAILED|OK \]" "$OUT/suite.txt"
grep -h "max jumps d128" "$OUT/test_gpu.log"
grep -hE "^check|^fp|^NVIDIA" "$OUT/ab-a1.txt" "$OUT/ab-a2.txt" "$OUT/ab-a3.txt" 2>/dev/null
cat "$OUT/san.txt"
echo "done at ${SECONDS} s"
