#!/bin/bash
# bench/exp/d128_table.sh -- sourced by the device scripts that end with
# the D = 128 table (issues 3 and 4): d128_table BUILD OUT runs `sagejit
# bench` for FP16PV fp32, FP8PV fp32+fp16 / fp32+fp32 / pvi8+splitv and
# WGMMA pvi8+splitv (B = 4, H = 32, 1K / 4K / 16K, causal both ways), then
# SDPA-cuDNN in the same call, logging to OUT/bench-FAMILY.log and
# OUT/sdpa.log and printing both.
d128_table() {
  local b=$1 out=$2 fa
  for fa in "fp16pv fp32" "fp8pv fp32+fp16,fp32+fp32,pvi8+splitv" "wgmma pvi8+splitv"; do
    set -- $fa
    timeout 200 "$b/sagejit" bench --family "$1" --accum "$2" --head-dim 128 --seq 1024,4096,16384 \
      --causal 0,1 > "$out/bench-$1.log" 2>&1
    echo "bench $1 rc=$?"; cut -c1-200 "$out/bench-$1.log"
  done
  timeout 200 python3 bench/sdpa_baseline.py --head-dim 128 --backends cudnn > "$out/sdpa.log" 2>&1
  echo "sdpa rc=$?"; grep sdpa- "$out/sdpa.log"
}
