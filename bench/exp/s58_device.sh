#!/bin/bash
# bench/exp/s58_device.sh BUILD -- fifty-eighth session, first call:
# `CHUNKED` for FP8PV's fp32 mode with VH on sm_90 at D = 128 (ab/c8; its
# P is fp16 pairs rounded to e4m3, the chunked step FP16PV runs), and the
# same with the vote (ab/c8v), against HEAD's templates (ab/base), beside
# fp32+fp16 and fp32+fp32 (unchanged kernels: the call's noise).  Verdicts
# print last, on stdout.
set -u
b=${1:?usage: bench/exp/s58_device.sh BUILD}
OUT=${OUT:-/tmp/out}
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
for v in base c8 c8v; do
  SAGEJIT_TEMPLATE_DIR=$PWD/ab/$v SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/ab-$v timeout 150 \
    "$b/sagejit" check --family fp8pv --head-dim 128 --accum fp32 --dtype fp16,bf16 \
    --json -q > "$OUT/chk-$v.json" 2> "$OUT/chk-$v.err"
  echo "check $v rc=$?"
done
python3 "$(dirname "$0")/same_json.py" "$OUT" base c8 c8v > "$OUT/ident.txt"
OUT=$OUT CHECK="--quick --family fp8pv --head-dim 128 --accum fp32" \
BENCH="--family fp8pv --head-dim 128 --accum fp32,fp32+fp16,fp32+fp32 --quant per_thread --dtype fp16 --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
ROUNDS=${ROUNDS:-2} timeout 400 bench/ab_templates.sh "$b" ab/base ab/c8 ab/c8v > "$OUT/ab.txt" 2>&1
echo "=== verdicts"
cat "$OUT/ident.txt"
grep -hE "^check|^fp|^NVIDIA|^per" "$OUT/ab.txt"
echo "done at ${SECONDS} s"
