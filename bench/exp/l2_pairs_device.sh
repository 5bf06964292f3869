#!/bin/bash
# The thirty-second session's L2-traffic runs (bench/NOTES.md, the l2 and
# pairs rows).  Variants of the solo wgmma kernel made from
# kernel_templates/ by --make:
#   l2half  K/V tiles copied only in every other round of stages (the
#           other rounds compute on the stale stage: wrong output, half the
#           K/V traffic from L2), l2q one round in four: the ceiling of
#           any change that cuts that traffic;
# and, when the build has bench/exp/solo_pairs.patch applied, the solo
# CTA pairs themselves (SAGEJIT_TUNE=cl=2) against the same templates.
# Before the device call, on the CPU machine:
#   bash bench/exp/l2_pairs_device.sh --make
# then through the device tool (carry build-gpu and ab):
#   bash bench/exp/l2_pairs_device.sh
set -u
if [ "${1:-}" = --make ]; then
  for v in cur l2half l2q; do
    rm -rf ab/$v && mkdir -p ab && cp -r kernel_templates ab/$v
  done
  for v in l2half:2 l2q:4; do
    f=ab/${v%%:*}/sj_attn_wgmma.cuh
    sed -i "/auto load_tile = \[&\](const TileRows &r, int j/{n;s|\$| if (SOLO \&\& ((j / STAGES) % ${v#*:}) != 0) { mbar_arrive(SJ_K_FULL(st)); if (!V_ON_K) mbar_arrive(SJ_V_FULL(st)); return; }|}" $f
    grep -q "% ${v#*:}) != 0) { mbar_arrive" $f || { echo "l2_pairs: ${v%%:*} not made" >&2; exit 1; }
  done
  exit 0
fi
B=build-gpu
. bench/gpu_libs.sh
gpu_libs $B
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
for r in 1 2; do
  for v in cur l2half l2q; do
    echo "--- $v round $r"
    SAGEJIT_TEMPLATE_DIR=$PWD/ab/$v SAGEJIT_CACHE_DIR=$PWD/$B/test-cache/ab-$v timeout 150 \
      $B/sagejit bench -q --family wgmma --head-dim 128 --seq 1024,2048,4096,8192,16384 \
      --causal 0 --iters 20 --warmup 5 2>&1 | grep -E "^ +[0-9]"
  done
done > "$OUT/l2.log"
cat "$OUT/l2.log"
if grep -q attn_wgmma_x2 kernel_templates/sj_attn_wgmma.cuh; then
  CHECK="--family wgmma --head-dim 128,64 --dtype fp16,bf16" \
    BENCH="--family wgmma --head-dim 128,64 --seq 1024,4096,8192,16384 --causal 0 --iters 20 --warmup 5" \
    ROUNDS=2 bash bench/ab_templates.sh $B ab/cur ab/cur@cl=2
fi
