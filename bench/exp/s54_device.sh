#!/bin/bash
# bench/exp/s54_device.sh BUILD -- fifty-fourth session's A/B, D = 128:
# (A) FP16PV fp32: `CHUNKED` without the mask with TMA tiles (ab/chk; m12
# measured it under cp.async only) and the P.V loop pair by pair instead
# of k-chunk by k-chunk (ab/pvo, built, not run: the device time), and one n-tile
# in four / eight of each step's exps from poly_exp2 on the FMA pipes
# (ab/poly4, ab/poly8; w27's lever, never tried in attn_mma), against the
# tree (ab/base); FP8PV fp32 in the same runs (unchanged by ab/chk: a
# control).  (B) FP8PV fp32+fp16 with VH forced and P kept as packed e4m3,
# widened per chunk before its mma (ab/pk8: one pair per pass as the tree;
# ab/pk8g2, 4, 8, built, not run: two, four, eight pairs), and poly4 /
# poly8 there too.  Caches: ab-base, ab-chk, ab-pvo, ab-poly4, ab-poly8, ab-pk8_vh-1,
# ab-pk8g2_vh-1, ab-pk8g4_vh-1, ab-pk8g8_vh-1.  The variants are kept as
# bench/exp/s54_poly4.patch, s54_pk8.patch and s54_pvo.patch (against
# c6e44a5); ab/chk is the shipped change.
set -u
b=${1:?usage: bench/exp/s54_device.sh BUILD}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/a" "$OUT/b"
OUT=$OUT/a CHECK="--quick --family fp16pv,fp8pv --head-dim 128 --accum fp32 --dtype fp16 --quant per_thread" \
BENCH="--family fp16pv,fp8pv --head-dim 128 --accum fp32 --quant per_thread --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
ROUNDS=2 timeout 250 bench/ab_templates.sh "$b" ab/base ab/chk ab/poly4 ab/poly8 2>&1 | tee "$OUT/ab-a.txt"
OUT=$OUT/b CHECK="--quick --family fp8pv --head-dim 128 --accum fp32+fp16 --dtype fp16 --quant per_thread" \
BENCH="--family fp8pv --head-dim 128 --accum fp32+fp16 --quant per_thread --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
ROUNDS=2 timeout 200 bench/ab_templates.sh "$b" ab/base ab/pk8@vh=1 ab/poly4 ab/poly8 2>&1 | tee "$OUT/ab-b.txt"
# (C) the full `check` at D = 128 (both dtypes, both masks, the family's
# granularity) on the candidates, so that a winner can ship on this call's
# evidence; their caches are warmed for it
for v in poly4 poly8 chk; do
  SAGEJIT_TEMPLATE_DIR=$PWD/ab/$v SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/ab-$v timeout 80 \
    "$b/sagejit" check --family fp16pv,fp8pv --head-dim 128 --accum fp32,fp32+fp16 \
    > "${OUT%/}/check-full-$v.log" 2>&1
  echo "check full $v: rc=$? $(tail -1 "${OUT%/}/check-full-$v.log")"
done
# the tree's errors beside them (the embedded templates, test_gpu's cache)
SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu timeout 80 "$b/sagejit" check --family fp16pv,fp8pv \
  --head-dim 128 --accum fp32,fp32+fp16 > "${OUT%/}/check-full-tree.log" 2>&1
echo "check full tree: rc=$? $(tail -1 "${OUT%/}/check-full-tree.log")"
