#!/bin/bash
# bench/exp/s59_device.sh BUILD -- the fifty-ninth session's device call.
# (A) the GPU suite on BUILD (BUILD/test-cache/test_gpu warmed for its
# templates): the c8x form (CHUNKED for FP8PV's fp32 mode at every VH head
# dim) and test_max_jumps over FP8PV fp32 at every head dim; (B)
# compute-sanitizer memcheck over `check --quick` of FP8PV fp32 at D = 64,
# 96 and 256; (C) while the call has time, ab/c16x (FP16PV's CHUNKED
# wherever it has TMA tiles: D = 96, 128 and 256, both masks) against
# ab/base at D = 96 and 256 (causal D = 128 lost 2 % chunked with the
# vote in the fifty-seventh session); (D) while it has time, `check` of
# FP8PV fp32 at D = 32 and 64 with VH forced on (SAGEJIT_TUNE vh=1, an A/B
# knob: the chunked step where no default runs it), compiled on the
# device into a scratch cache.  LIMIT: the call's seconds.  Verdicts
# print last.
set -u
b=${1:?usage: bench/exp/s59_device.sh BUILD}
OUT=${OUT:-/tmp/out}
LIMIT=${LIMIT:-560}
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
# shellcheck disable=SC2086
OUT=$OUT bash bench/gpu_session.sh "$b" ${STEPS:-test varlen faults} > "$OUT/suite.txt" 2>&1
echo "suite done at ${SECONDS} s"
. "$(dirname "$0")/san_check.sh"
SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu san_check "$b" "$OUT" mem8x memcheck \
  --family fp8pv --head-dim 64,96,256 --accum fp32 > "$OUT/san.txt" 2>&1
echo "san done at ${SECONDS} s"
if [ "$SECONDS" -lt $((LIMIT - 110)) ]; then
  mkdir -p "$OUT/a1"
  OUT=$OUT/a1 CHECK="--quick --family fp16pv --head-dim 96,256 --accum fp32" \
  BENCH="--family fp16pv --head-dim 96,256 --accum fp32 --quant per_thread --dtype fp16 --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
  ROUNDS=2 timeout 100 bench/ab_templates.sh "$b" ab/base ab/c16x > "$OUT/ab-a1.txt" 2>&1
fi
if [ "$SECONDS" -lt $((LIMIT - 60)) ]; then
  mkdir -p /tmp/vh1-cache
  SAGEJIT_TUNE=vh=1 SAGEJIT_CACHE_DIR=/tmp/vh1-cache timeout $((LIMIT - SECONDS - 10)) "$b/sagejit" check --quick \
    --family fp8pv --accum fp32 --head-dim 32,64 --dtype fp16 > "$OUT/vh1.log" 2>&1
  echo "vh1 check: rc=$? $(tail -1 "$OUT/vh1.log")" > "$OUT/vh1.txt"
else
  echo "vh1 check: skipped at ${SECONDS} s" > "$OUT/vh1.txt"
fi
echo "=== verdicts"
grep -E "rc=|cases|PASSED|FAILED|^\[  FAILED|OK \]" "$OUT/suite.txt"
grep -h "max jumps" "$OUT/test_gpu.log"
grep -hE "^check|^fp|^NVIDIA" "$OUT/ab-a1.txt" 2>/dev/null
cat "$OUT/san.txt" "$OUT/vh1.txt"
echo "done at ${SECONDS} s"
