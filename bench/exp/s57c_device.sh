#!/bin/bash
# bench/exp/s57c_device.sh BUILD -- fifty-seventh session, third call:
# ab/du (VOTE1 and DEFER in every non-INT8-P mode on sm_90, the unchunked
# steps included: there the first row's exps go before the branch on the
# vote) against ab/ship (the shipped tree).  (0) `check --json` of both on
# the same seeds, compared field for field.  (A) FP8PV fp32+fp16,
# fp32+fp32 and pvi8+splitv at D = 128, two rounds.  (B) FP16PV fp32 at
# causal D = 128 and at D = 32, 64, 96, 256, two rounds.  (C) the D = 128
# table beside SDPA-cuDNN on BUILD (the shipped templates; cache
# test_gpu).  Caches ab-ship, ab-du, test_gpu.
set -u
b=${1:?usage: bench/exp/s57c_device.sh BUILD}
OUT=${OUT:-/tmp/out}
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
mkdir -p "$OUT/a" "$OUT/b"
for v in ship du; do
  SAGEJIT_TEMPLATE_DIR=$PWD/ab/$v SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/ab-$v timeout 120 \
    "$b/sagejit" check --family fp16pv,fp8pv --head-dim 64,128 --accum fp32,fp32+fp16,fp32+fp32 \
    --dtype fp16 --json -q > "$OUT/chk-$v.json" 2> "$OUT/chk-$v.err"
  echo "check $v rc=$? $(tail -c 300 "$OUT/chk-$v.err")"
done
python3 "$(dirname "$0")/same_json.py" "$OUT" ship du
echo "checks done at ${SECONDS} s"
OUT=$OUT/a CHECK="--quick --family fp8pv --head-dim 128 --accum pvi8+splitv --dtype fp16" \
BENCH="--family fp8pv --head-dim 128 --accum fp32+fp16,fp32+fp32,pvi8+splitv --quant per_thread --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
ROUNDS=2 timeout 150 bench/ab_templates.sh "$b" ab/ship ab/du 2>&1 | tee "$OUT/ab-a.txt"
echo "A done at ${SECONDS} s"
OUT=$OUT/b CHECK="--quick --family fp16pv --head-dim 256 --accum fp32 --dtype fp16" \
BENCH="--family fp16pv --head-dim 128,32,64,96,256 --accum fp32 --quant per_thread --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
ROUNDS=2 timeout 200 bench/ab_templates.sh "$b" ab/ship ab/du 2>&1 | tee "$OUT/ab-b.txt"
echo "B done at ${SECONDS} s"
if [ "$SECONDS" -gt $((${LIMIT:-570} - 130)) ]; then
  echo "table: skipped at ${SECONDS} s"
  exit 0
fi
. "$(dirname "$0")/d128_table.sh"
SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu d128_table "$b" "$OUT"
echo "done at ${SECONDS} s"
