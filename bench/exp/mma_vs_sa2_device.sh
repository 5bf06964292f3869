#!/bin/bash
# bench/exp/mma_vs_sa2_device.sh BUILD [N] -- issue 3's gap, instruction by
# instruction: SageAttention2's sm80 kernel (INT8 Q.K^T, FP16 P.V, the
# anchor of the FP16PV family) against attn_mma's FP16PV default on the
# same card, D = 128, fp16, non-causal, B = 4, H = 32, N (default 4096).
# One launch of each under ncu's SourceCounters (PC sampling) and the
# warp-state, instruction, compute and occupancy sections; the reports,
# their SASS source pages (CSV) and a summary under $OUT.  Read the CSVs
# with `bench/exp/srcprof.py FILE`, whose opcode table puts the two
# kernels' instruction mixes side by side (both tiles are 128 query rows x
# 64 keys, four warps of 32 rows: divide by the tile count, B * H * (N /
# 128) * (N / 64) per kernel).
#
# Needs build-sa2/bin/sa2_mma_bench (bench/sa2/README.md; the forty-second
# session left one built from fetched SageAttention headers in the ignored
# build-sa2/, rebuild.sh there; carry build-sa2 with BUILD) and ncu.
# About three minutes on an H100.
set -u
b=${1:?usage: bench/exp/mma_vs_sa2_device.sh BUILD [N]}
n=${2:-4096}
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
cli=$PWD/$b/sagejit
sa2=$PWD/build-sa2/bin/sa2_mma_bench
export SAGEJIT_CACHE_DIR=${SAGEJIT_CACHE_DIR:-$PWD/$b/test-cache/mma_vs_sa2}
sections=(--section SourceCounters --section WarpStateStats --section InstructionStats
          --section ComputeWorkloadAnalysis --section LaunchStats --section Occupancy
          --section SpeedOfLight)
# SA2's numerics first (its sanity check against an FP32 host reference)
timeout 120 "$sa2" --check-only --kernels sm80 --head-dim 128 > "$OUT/sa2_check.log" 2>&1
echo "sa2 check rc=$?: $(grep -E "^check" "$OUT/sa2_check.log" | tr '\n' ' ' | cut -c1-300)"
# plain timings, both, same call (two rounds)
for r in 1 2; do
  timeout 120 "$sa2" --kernels sm80 --head-dim 128 --seq "$n" --causal 0 --check 0 2>&1 |
    grep -E "^sa2"
  timeout 120 "$cli" bench --family fp16pv --head-dim 128 --seq "$n" --causal 0 --no-progress 2>&1 |
    grep -E "^ +[0-9]"
done
timeout 240 ncu --clock-control none -k regex:qk_int_sv_f16_attn_kernel --launch-skip 1 \
  --launch-count 1 "${sections[@]}" -f -o "$OUT/sa2" \
  "$sa2" --kernels sm80 --head-dim 128 --seq "$n" --causal 0 --check 0 --iters 1 --warmup 1 \
  > "$OUT/sa2_ncu.log" 2>&1
echo "ncu sa2 rc=$?"
timeout 240 ncu --clock-control none -k regex:attn_mma --launch-skip 1 --launch-count 1 \
  "${sections[@]}" -f -o "$OUT/ours" \
  "$cli" bench --family fp16pv --head-dim 128 --seq "$n" --causal 0 --iters 1 --warmup 1 \
  > "$OUT/ours_ncu.log" 2>&1
echo "ncu ours rc=$?"
for k in sa2 ours; do
  [ -f "$OUT/$k.ncu-rep" ] || continue
  timeout 120 ncu -i "$OUT/$k.ncu-rep" --page source --csv --print-source sass \
    > "$OUT/$k.csv" 2> "$OUT/$k.err"
  echo "=== $k: source page $(wc -l < "$OUT/$k.csv") lines"
  timeout 60 ncu -i "$OUT/$k.ncu-rep" --page details 2>&1 |
    grep -E "Duration|Registers|Executed Ipc|Issue Slots|Warp Cycles Per Issued|Eligible|Active Warps|Achieved Occupancy|Stall|Pipe|Tensor|Executed Instructions " |
    sed 's/  */ /g' | head -50
  python3 "$(dirname "$0")/srcprof.py" "$OUT/$k.csv" 25 > "$OUT/$k.srcprof.txt" 2>&1 &&
    sed -n '/by opcode/,/^$/p' "$OUT/$k.srcprof.txt"
done
