#!/bin/bash
# bench/exp/s60b_device.sh BUILD -- the sixtieth session's second call:
# (A) the GPU suite on BUILD (BUILD/test-cache/test_gpu warmed for its
# templates): FP8PV's fp32 mode with VH and CHUNKED at non-causal D = 32
# (vh32) and two deferred chunks at D = 64 (nd2), test_max_jumps over both;
# (B) compute-sanitizer memcheck over `check --quick` of FP8PV fp32 at D =
# 32 and 64; (C) ab/nd32 (DEFER over two chunks in more chunked cells:
# FP8PV fp32 at non-causal D = 32 and 256, FP16PV fp32 at causal D = 32
# and 96) against ab/base2 (the tree's templates); FP8PV D = 64, the same
# kernel in both, is a control.  Verdicts print last.
set -u
b=${1:?usage: bench/exp/s60b_device.sh BUILD}
OUT=${OUT:-/tmp/out}
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
OUT=$OUT bash bench/gpu_session.sh "$b" test varlen faults > "$OUT/suite.txt" 2>&1
echo "suite done at ${SECONDS} s"
. "$(dirname "$0")/san_check.sh"
SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu san_check "$b" "$OUT" mem3264 memcheck \
  --family fp8pv --head-dim 32,64 --accum fp32 > "$OUT/san.txt" 2>&1
echo "san done at ${SECONDS} s"
mkdir -p "$OUT/c" "$OUT/d"
OUT=$OUT/c CHECK="--quick --family fp8pv --accum fp32 --head-dim 32,64,256" \
  BENCH="--family fp8pv --accum fp32 --quant per_thread --dtype fp16 --seq 1024,4096,16384 --iters 20 --warmup 5 --head-dim 32,64,256 --causal 0" \
  ROUNDS=2 timeout 150 bench/ab_templates.sh "$b" ab/base2 ab/nd32 > "$OUT/ab-c.txt" 2>&1
OUT=$OUT/d CHECK="--quick --family fp16pv --accum fp32 --head-dim 32,96" \
  BENCH="--family fp16pv --accum fp32 --quant per_thread --dtype fp16 --seq 1024,4096,16384 --iters 20 --warmup 5 --head-dim 32,96 --causal 1" \
  ROUNDS=2 timeout 120 bench/ab_templates.sh "$b" ab/base2 ab/nd32 > "$OUT/ab-d.txt" 2>&1
echo "=== verdicts"
grep -E "rc=|cases|PASSED|FAILED|^\[  FAILED|OK \]" "$OUT/suite.txt"
grep -h "max jumps.*fp8pv fp32 " "$OUT/test_gpu.log"
grep -hE "^check|^fp|^NVIDIA|ab_templates" "$OUT/ab-c.txt" "$OUT/ab-d.txt"
cat "$OUT/san.txt"
echo "done at ${SECONDS} s"
