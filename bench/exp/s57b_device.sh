#!/bin/bash
# bench/exp/s57b_device.sh BUILD -- fifty-seventh session, second call:
# the shipped tree (ab/ship: VOTE1 and DEFER where the first call measured
# gains, sm_90 only) against ab/base (the tree before).  (A) FP16PV fp32,
# non-causal D = 128, fp16 and bf16, three rounds, with two more
# variants: ab/df2 (DEFER over the first two chunks) and ship@rul=8.
# (B) the other shipped cells (non-causal D = 32; causal D = 32, 96), fp16
# and bf16, two rounds.  (C) the GPU suite on BUILD (which embeds the
# shipped templates; BUILD/test-cache/test_gpu warmed for them): test_gpu,
# test_gpu_varlen, test_gpu_faults.  (D) compute-sanitizer memcheck and
# racecheck over `check --quick` of the changed kernels.  (B2) ab/cc,
# CHUNKED + DEFER at causal D = 128.  Caches ab-base, ab-ship, ab-df2,
# ab-ship_rul-8, ab-cc, test_gpu.
set -u
b=${1:?usage: bench/exp/s57b_device.sh BUILD}
OUT=${OUT:-/tmp/out}
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
mkdir -p "$OUT/a" "$OUT/b" "$OUT/b2"
OUT=$OUT/a CHECK="--quick --family fp16pv --head-dim 128 --accum fp32" \
BENCH="--family fp16pv --head-dim 128 --accum fp32 --quant per_thread --dtype fp16,bf16 --seq 1024,4096,16384 --causal 0 --iters 20 --warmup 5" \
ROUNDS=3 timeout 200 bench/ab_templates.sh "$b" ab/base ab/ship ab/df2 ab/ship@rul=8 2>&1 | tee "$OUT/ab-a.txt"
echo "A done at ${SECONDS} s"
OUT=$OUT/b CHECK="--family fp16pv --head-dim 32,96 --accum fp32" \
BENCH="--family fp16pv --head-dim 32,96 --accum fp32 --quant per_thread --dtype fp16,bf16 --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
ROUNDS=2 timeout 160 bench/ab_templates.sh "$b" ab/base ab/ship 2>&1 | tee "$OUT/ab-b.txt"
echo "B done at ${SECONDS} s"
# (B2) ab/cc: CHUNKED (and so DEFER) at causal D = 128 too
OUT=$OUT/b2 CHECK="--quick --family fp16pv --head-dim 128 --accum fp32" \
BENCH="--family fp16pv --head-dim 128 --accum fp32 --quant per_thread --seq 1024,4096,16384 --causal 1 --iters 20 --warmup 5" \
ROUNDS=3 timeout 120 bench/ab_templates.sh "$b" ab/base ab/cc 2>&1 | tee "$OUT/ab-b2.txt"
echo "B2 done at ${SECONDS} s"
OUT=$OUT bash bench/gpu_session.sh "$b" info test varlen faults 2>&1 | tail -30
echo "suite done at ${SECONDS} s"
if [ "$SECONDS" -gt $((${LIMIT:-560} - 80)) ]; then
  echo "sanitizers: skipped at ${SECONDS} s"
  exit 0
fi
. "$(dirname "$0")/san_check.sh"
for hd in 128 32 96; do
  SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu san_check "$b" "$OUT" mem$hd memcheck \
    --family fp16pv --head-dim $hd --accum fp32
done
SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu san_check "$b" "$OUT" race128 racecheck \
  --family fp16pv --head-dim 128 --accum fp32
echo "done at ${SECONDS} s"
