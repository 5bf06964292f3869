#!/bin/bash
# bench/exp/srcprof_device.sh BUILD [N...] -- where the default wgmma
# kernel's warps wait, per SASS instruction: one attn_wgmma launch (D = 128,
# fp16, non-causal, the default plan) per N under ncu's SourceCounters
# (PC sampling), the report and its source page (CSV, SASS) under $OUT.
# Read them with bench/exp/srcprof.py.
set -u
b=${1:?usage: bench/exp/srcprof_device.sh BUILD [N...]}
shift
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
cli=$PWD/$b/sagejit
export SAGEJIT_CACHE_DIR=${SAGEJIT_CACHE_DIR:-$PWD/$b/test-cache/srcprof}
[ $# -gt 0 ] || set -- 1024 4096
for n in "$@"; do
  timeout 240 ncu --clock-control none -k regex:attn_wgmma --launch-skip 2 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section LaunchStats --section Occupancy \
    --section SpeedOfLight -f -o "$OUT/src$n" \
    "$cli" bench --family wgmma --head-dim 128 --seq "$n" --causal 0 --iters 1 --warmup 1 \
    > "$OUT/src$n.log" 2>&1
  echo "ncu $n rc=$?"
  timeout 120 ncu -i "$OUT/src$n.ncu-rep" --page source --csv --print-source sass \
    > "$OUT/src$n.csv" 2> "$OUT/src$n.err" ||
    timeout 120 ncu -i "$OUT/src$n.ncu-rep" --page source --csv > "$OUT/src$n.csv" 2>> "$OUT/src$n.err"
  echo "source page $n: $(wc -l < "$OUT/src$n.csv") lines; $(head -c 300 "$OUT/src$n.err")"
  timeout 60 ncu -i "$OUT/src$n.ncu-rep" --page details --section WarpStateStats --section SpeedOfLight \
    --section Occupancy 2>&1 | grep -E "Stall|Duration|Throughput|Occupancy|Warp Cycles|Eligible|Issued" |
    sed 's/  */ /g' | head -40
done
