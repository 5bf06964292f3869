#!/bin/bash
# bench/exp/s55_ship_device.sh BUILD -- fifty-fifth session, last device
# call: the tree with HSUM (FP16PV fp32, fp16 input, non-causal D = 64 on
# sm_90: the row sums as f16x2 adds of the packed P; bench/NOTES.md hs)
# under the GPU suite and compute-sanitizer (memcheck and racecheck over
# `check --quick` at D = 64), the A/B at D = 64 again (ab/chk against
# ab/t55, the tree's templates), and hsx (HSUM in the other unchunked
# fp16 cells: non-causal D = 32, 96, 256 and causal D = 256) against the
# tree.  Caches warmed on the CPU machine: test_gpu, ab-chk, ab-t55, ab-hsx.
set -u
b=${1:?usage: bench/exp/s55_ship_device.sh BUILD}
OUT=${OUT:-/tmp/out}
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
OUT=$OUT bash bench/gpu_session.sh "$b" info test varlen faults
. "$(dirname "$0")/san_check.sh"
export SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu
san_check "$b" "$OUT" mem64 memcheck --family fp16pv --head-dim 64 --accum fp32
unset SAGEJIT_CACHE_DIR
mkdir -p "$OUT/c" "$OUT/d"
OUT=$OUT/c CHECK="--quick --family fp16pv --head-dim 64 --accum fp32 --dtype fp16 --quant per_thread" \
BENCH="--family fp16pv --head-dim 64 --accum fp32 --quant per_thread --seq 1024,4096,16384 --causal 0 --iters 20 --warmup 5" \
ROUNDS=2 timeout 80 bench/ab_templates.sh "$b" ab/chk ab/t55 2>&1 | tee "$OUT/ab-c.txt"
SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu san_check "$b" "$OUT" race64 racecheck --family fp16pv --head-dim 64 --accum fp32
# (hsx only while the call has time left: LIMIT seconds in all)
if [ "$SECONDS" -gt $((${LIMIT:-400} - 120)) ]; then
  echo "hsx: skipped at ${SECONDS} s"
  exit 0
fi
OUT=$OUT/d CHECK="--family fp16pv --head-dim 32,96,256 --accum fp32 --dtype fp16" \
BENCH="--family fp16pv --head-dim 32,96,256 --accum fp32 --quant per_thread --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
ROUNDS=2 timeout $((${LIMIT:-400} - SECONDS)) bench/ab_templates.sh "$b" ab/t55 ab/hsx 2>&1 | tee "$OUT/ab-d.txt"
