#!/bin/bash
# bench/exp/s53b_device.sh BUILD -- fifty-third session, after s53: VH
# with V's token permutation undone (ab/vh; ab/vhg the same without
# GP_ONE's one-pair rule for fp32+fp16), TMA forced (`tma=1`) so that VH
# runs wherever the template can: (1) `sagejit check` of FP8PV's e4m3
# modes with the tree's templates (ab/base2) and with VH, for the errors
# side by side; (2) D = 128 at 1K / 4K / 16K, three variants; (3) D = 32,
# 64, 96 and 256 at 4K / 16K.  Caches: ab-base2, ab-vh_tma-1, ab-vhg_tma-1.
set -u
b=${1:?usage: bench/exp/s53b_device.sh BUILD}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/acc" "$OUT/a" "$OUT/b"
for v in base2 vh; do
  tune= cache=ab-base2
  [ "$v" = vh ] && tune=tma=1 cache=ab-vh_tma-1
  export SAGEJIT_TUNE=$tune SAGEJIT_TEMPLATE_DIR=$PWD/ab/$v SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/$cache
  timeout 150 "$b/sagejit" check --family fp8pv --head-dim 128 --accum fp32,fp32+fp16,fp32+fp32 \
    > "$OUT/acc/check-$v-128.log" 2>&1
  echo "check $v D128: rc=$? $(tail -1 "$OUT/acc/check-$v-128.log")"
  timeout 150 "$b/sagejit" check --quick --family fp8pv --head-dim 32,64,96,256 --dtype fp16 \
    --accum fp32,fp32+fp16,fp32+fp32 > "$OUT/acc/check-$v-quick.log" 2>&1
  echo "check $v quick: rc=$? $(tail -1 "$OUT/acc/check-$v-quick.log")"
  unset SAGEJIT_TUNE SAGEJIT_TEMPLATE_DIR SAGEJIT_CACHE_DIR
done
OUT=$OUT/a CHECK="--quick --family fp8pv --head-dim 128 --accum fp32+fp16 --dtype fp16" \
BENCH="--family fp8pv --head-dim 128 --accum fp32,fp32+fp16,fp32+fp32 --quant per_thread --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
ROUNDS=2 timeout 200 bench/ab_templates.sh "$b" ab/base2 ab/vh@tma=1 ab/vhg@tma=1 2>&1 | tee "$OUT/ab-128.txt"
OUT=$OUT/b CHECK="--quick --family fp8pv --head-dim 64 --accum fp32+fp32 --dtype fp16" \
BENCH="--family fp8pv --head-dim 32,64,96,256 --accum fp32,fp32+fp16,fp32+fp32 --quant per_thread --seq 4096,16384 --causal 0,1 --iters 10 --warmup 3" \
ROUNDS=2 timeout 220 bench/ab_templates.sh "$b" ab/base2 ab/vh@tma=1 2>&1 | tee "$OUT/ab-dx.txt"
