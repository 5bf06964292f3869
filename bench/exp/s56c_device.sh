#!/bin/bash
# bench/exp/s56c_device.sh BUILD -- fifty-sixth session, third call: ab/eb
# (EBAR: attn_mma's TMA stages released on an empty mbarrier per stage,
# one arrive per warp, that only the refilling thread waits on, instead of
# the per-tile __syncthreads; three-stage TMA kernels without VH) against
# ab/base (HEAD's templates).  The source profile of the FP16PV D = 128
# kernel put 8 % of its samples in the per-tile barrier's region.  (A)
# FP16PV fp32 at non-causal D = 128 and 96, three rounds; (B) FP8PV
# fp32+fp16 and pvi8+splitv at non-causal D = 128, two rounds; the full
# `check` (FP16PV and FP8PV, D = 96 and 128, both dtypes) on eb first.
# (C) If eb gained on FP16PV D = 128 (mean of the three cells > +1 %),
# test_gpu and test_gpu_varlen with eb's templates (the packed calls' last
# tile keeps its __syncthreads; BUILD/test-cache/test_gpu is warmed for
# ab/eb for this call).  Caches: ab-base, ab-eb, test_gpu (eb).
set -u
b=${1:?usage: bench/exp/s56c_device.sh BUILD}
OUT=${OUT:-/tmp/out}
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
mkdir -p "$OUT/a" "$OUT/b"
OUT=$OUT/a CHECK="--family fp16pv,fp8pv --head-dim 96,128 --accum fp32,fp32+fp16,pvi8+splitv" \
BENCH="--family fp16pv --head-dim 128,96 --accum fp32 --quant per_thread --seq 1024,4096,16384 --causal 0 --iters 20 --warmup 5" \
ROUNDS=3 timeout 200 bench/ab_templates.sh "$b" ab/base ab/eb 2>&1 | tee "$OUT/ab-a.txt"
grep -q "^check ab/eb: rc=0" "$OUT/ab-a.txt" || { echo "eb: check failed; stopping"; exit 1; }
OUT=$OUT/b CHECK="--quick --family fp8pv --head-dim 128 --accum fp32+fp16 --dtype fp16" \
BENCH="--family fp8pv --head-dim 128 --accum fp32+fp16,pvi8+splitv --quant per_thread --seq 1024,4096,16384 --causal 0 --iters 20 --warmup 5" \
ROUNDS=2 timeout 150 bench/ab_templates.sh "$b" ab/base ab/eb 2>&1 | tee "$OUT/ab-b.txt"
echo "A/B done at ${SECONDS} s"
gain=$(grep -E "^fp16pv .*D128 c0 .* attn" "$OUT/ab-a.txt" | grep -oE "[-+][0-9.]+%" |
       tr -d '%' | awk '{s += $1; n++} END {printf "%.2f", n ? s / n : -99}')
echo "eb FP16PV D = 128 mean attention change: $gain %"
if [ "$SECONDS" -gt $((${LIMIT:-420} - 170)) ]; then
  echo "suite: skipped at ${SECONDS} s"
elif awk "BEGIN {exit !($gain > 1.0)}"; then
  export SAGEJIT_TEMPLATE_DIR=$PWD/ab/eb
  OUT=$OUT bash bench/gpu_session.sh "$b" test varlen 2>&1 | tail -16
fi
echo "done at ${SECONDS} s"
