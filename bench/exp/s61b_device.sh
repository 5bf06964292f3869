#!/bin/bash
# bench/exp/s61b_device.sh BUILD -- the sixty-first session's table call:
# issue 3's and 4's D = 128 table (d128_table: FP16PV fp32, FP8PV
# fp32+fp16 / fp32+fp32 / pvi8+splitv, WGMMA pvi8+splitv, causal both
# ways, SDPA-cuDNN), then the families' defaults at D = 64 and SDPA-cuDNN
# there, all in one call.
set -u
b=${1:?usage: bench/exp/s61b_device.sh BUILD}
OUT=${OUT:-/tmp/out}
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
export SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu
. "$(dirname "$0")/d128_table.sh"
d128_table "$b" "$OUT" > "$OUT/d128.txt" 2>&1
for f in wgmma fp16pv fp8pv; do
  timeout 150 "$b/sagejit" bench --family $f --head-dim 64 --seq 1024,4096,16384 --causal 0,1 \
    > "$OUT/bench64-$f.log" 2>&1
  echo "bench64 $f rc=$?"; cut -c1-200 "$OUT/bench64-$f.log"
done > "$OUT/d64.txt" 2>&1
timeout 200 python3 bench/sdpa_baseline.py --head-dim 64 --backends cudnn > "$OUT/sdpa64.log" 2>&1
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > "$OUT/smi.txt" 2>&1
cat "$OUT/d64.txt"; grep sdpa- "$OUT/sdpa64.log"
echo "=== D = 128"
cat "$OUT/d128.txt"
cat "$OUT/smi.txt"
echo "done at ${SECONDS} s"
