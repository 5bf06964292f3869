#!/bin/bash
# bench/exp/s60d_device.sh BUILD -- the sixtieth session's last call: the GPU
# suite on BUILD (BUILD/test-cache/test_gpu warmed for its templates) with
# FP8PV's fp32 mode chunked at causal D = 64 (TMA tiles and VH, vh64c), and
# compute-sanitizer memcheck over `check --quick` of that mode at D = 64.
set -u
b=${1:?usage: bench/exp/s60d_device.sh BUILD}
OUT=${OUT:-/tmp/out}
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
OUT=$OUT bash bench/gpu_session.sh "$b" test varlen faults > "$OUT/suite.txt" 2>&1
. "$(dirname "$0")/san_check.sh"
SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu san_check "$b" "$OUT" mem64 memcheck \
  --family fp8pv --head-dim 64 --accum fp32 > "$OUT/san.txt" 2>&1
echo "=== verdicts"
grep -E "rc=|cases|PASSED|FAILED|^\[  FAILED|OK \]" "$OUT/suite.txt"
grep -h "max jumps.*fp8pv fp32 " "$OUT/test_gpu.log"
cat "$OUT/san.txt"
echo "done at ${SECONDS} s"
