#!/bin/bash
# bench/exp/s56_device.sh BUILD -- fifty-sixth session's A/B: ptxas's
# --register-usage-level (SAGEJIT_TUNE "rul=2" / "rul=8" against the
# default 5; on sm_90a the attention kernels compile one way at 0-3,
# another at 4-5, a third at 6-10), the same templates (ab/base, HEAD's)
# in all three.  (A) FP16PV fp32, D = 128 (issue 3's goal cells).  (B)
# FP8PV fp32+fp16 (issue 3) and pvi8+splitv (sm_90's FP8PV default),
# D = 128.  (C) WGMMA's default at D = 128 and 64 (issue 4).  Then (D) the
# D = 128 table beside SDPA-cuDNN in the same call, and (E) while the call
# has time (LIMIT seconds in all), ncu's source page of the FP16PV D = 128
# kernel at 4K (bench/exp/srcprof.py reads it).  Caches warmed on the CPU
# machine: ab-base, ab-base_rul-2, ab-base_rul-8.  Results print to
# stdout (files in subdirectories of $OUT do not come back).
set -u
b=${1:?usage: bench/exp/s56_device.sh BUILD}
OUT=${OUT:-/tmp/out}
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
mkdir -p "$OUT/a" "$OUT/b" "$OUT/c"
V="ab/base ab/base@rul=2 ab/base@rul=8"
# shellcheck disable=SC2086
OUT=$OUT/a CHECK="--quick --family fp16pv --head-dim 128 --accum fp32 --dtype fp16 --quant per_thread" \
BENCH="--family fp16pv --head-dim 128 --accum fp32 --quant per_thread --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
ROUNDS=3 timeout 200 bench/ab_templates.sh "$b" $V 2>&1 | tee "$OUT/ab-a.txt"
# shellcheck disable=SC2086
OUT=$OUT/b CHECK="--quick --family fp8pv --head-dim 128 --accum fp32+fp16,pvi8+splitv --dtype fp16 --quant per_thread" \
BENCH="--family fp8pv --head-dim 128 --accum fp32+fp16,pvi8+splitv --quant per_thread --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
ROUNDS=2 timeout 220 bench/ab_templates.sh "$b" $V 2>&1 | tee "$OUT/ab-b.txt"
# shellcheck disable=SC2086
OUT=$OUT/c CHECK="--quick --family wgmma --head-dim 64,128 --dtype fp16 --quant per_thread" \
BENCH="--family wgmma --head-dim 128,64 --quant per_thread --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
ROUNDS=2 timeout 200 bench/ab_templates.sh "$b" $V 2>&1 | tee "$OUT/ab-c.txt"
echo "A/B done at ${SECONDS} s"
. "$(dirname "$0")/d128_table.sh"
SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/ab-base d128_table "$b" "$OUT"
echo "table done at ${SECONDS} s"
if [ "$SECONDS" -gt $((${LIMIT:-560} - 90)) ]; then
  echo "srcprof: skipped at ${SECONDS} s"
  exit 0
fi
SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/ab-base timeout $((${LIMIT:-560} - SECONDS - 10)) \
  ncu --clock-control none -k regex:attn_mma --launch-skip 1 --launch-count 1 \
  --section SourceCounters --section WarpStateStats -f -o "$OUT/fp16pv128" \
  "$b/sagejit" bench --family fp16pv --head-dim 128 --seq 4096 --causal 0 --iters 1 --warmup 1 \
  > "$OUT/ncu.log" 2>&1
echo "ncu rc=$?"
if [ -f "$OUT/fp16pv128.ncu-rep" ]; then
  timeout 60 ncu -i "$OUT/fp16pv128.ncu-rep" --page source --csv --print-source sass \
    > "$OUT/fp16pv128.csv" 2> "$OUT/fp16pv128.err"
  python3 "$(dirname "$0")/srcprof.py" "$OUT/fp16pv128.csv" 25 2>&1 | head -80
fi
echo "done at ${SECONDS} s"
