#!/bin/bash
# bench/exp/s60c_device.sh BUILD -- the sixtieth session's third call: FP8PV's
# fp32 mode at causal D = 64 with TMA tiles and VH forced on
# (SAGEJIT_TUNE tma=1,vh=1), hence the chunked step, against the tree
# (cp.async, unchunked); non-causal D = 64 (the default's kernel either
# way) is a control.  Verdicts print last.
set -u
b=${1:?usage: bench/exp/s60c_device.sh BUILD}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/e"
OUT=$OUT/e CHECK="--quick --family fp8pv --accum fp32 --head-dim 64" \
  BENCH="--family fp8pv --accum fp32 --quant per_thread --dtype fp16 --seq 1024,4096,16384 --iters 20 --warmup 5 --head-dim 64 --causal 1,0" \
  ROUNDS=3 timeout 150 bench/ab_templates.sh "$b" ab/base2 ab/base2@tma=1,vh=1 > "$OUT/ab-e.txt" 2>&1
echo "=== verdicts"
grep -hE "^check|^fp|^NVIDIA|ab_templates" "$OUT/ab-e.txt"
echo "done at ${SECONDS} s"
