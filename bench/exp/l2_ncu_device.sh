#!/bin/bash
# The thirty-third session's look at where the solo kernel's K/V traffic
# goes from 8K on (bench/NOTES.md, the l2 row: half the traffic is +8 %
# there, nothing up to 4K).  ncu memory counters of one attn_wgmma launch
# (D = 128, non-causal) at 4K / 8K / 16K, for the shipped templates (cur)
# and the l2half ablation (K/V copied in every other round only).
# Before the device call, on the CPU machine:
#   bash bench/exp/l2_pairs_device.sh --make   # ab/cur, ab/l2half
#   (warm ab-cur / ab-l2half as bench/ab_templates.sh says)
# then through the device tool (carry build-gpu and ab):
#   bash bench/exp/l2_ncu_device.sh
set -u
B=build-gpu
. bench/gpu_libs.sh
gpu_libs $B
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_read.sum
M=$M,lts__t_sector_op_read_hit_rate.pct,lts__t_sectors_srcunit_ltcfabric.sum
M=$M,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed
M=$M,lts__t_sectors_srcunit_tex_op_read.sum,lts__average_t_sector_hit_rate_realtime.pct
for v in cur l2half; do
  for n in 4096 8192 16384; do
    echo "=== $v N=$n"
    SAGEJIT_TEMPLATE_DIR=$PWD/ab/$v SAGEJIT_CACHE_DIR=$PWD/$B/test-cache/ab-$v timeout 120 \
      ncu --clock-control none -k regex:attn_wgmma --launch-skip 2 --launch-count 1 --metrics "$M" \
      $B/sagejit bench --family wgmma --head-dim 128 --seq $n --causal 0 --iters 1 --warmup 1 2>&1 |
      grep -E "^ +(gpu__|dram__|lts__)" | sed 's/  */ /g'
  done
done | tee "$OUT/l2_ncu.log"
