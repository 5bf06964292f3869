#!/bin/bash
# bench/exp/mma_bulk.sh prepare|device BUILD [ROUNDS] -- FP16PV's K/V tiles
# by cp.async.bulk row copies (bench/exp/mma_bulk.py, `BULK`) against the
# tree, one device call (forty-sixth session: −11 to −45 % on the H100,
# closed; bench/NOTES.md bulk).
#
# The l2h row of bench/NOTES.md: the cp.async copies cost FP16PV 4-7 %
# (14 % at non-causal 16K), of which this can take only the issue side
# (the same bytes move).  ptxas -v sm_90a, fp16, fp32 mode, tree -> BULK:
# D = 32 184 -> 150 registers (three CTAs per multiprocessor instead of
# two; causal 182 -> 174), D = 96 64 / 76 and 56 / 68 bytes of spill
# stores / loads -> none, D = 128 0 -> 0 (254 registers; causal 40 / 52 ->
# 76 / 88).  Every instance without three stages compiles as before.
#
#   prepare  (CPU machine): ab/base (the tree) and ab/bulk, their caches,
#            gpu-pack.  ~1 min on two cores.
#   device   (carry BUILD and ab): `sagejit check` of bulk (FP16PV fp32
#            and fp16+fp32 at D = 32, 96, 128, both dtypes, every
#            granularity), then bench/ab_templates.sh; table in
#            $OUT/bulk/out.txt.  ~5 min on an H100 with ROUNDS 3.
# If it wins: test_gpu, test_gpu_varlen (FP16 V's tail rows are zero-filled
# by plain stores here, and packed sequences put the next sequence's rows
# after the tail) and test_gpu_faults on the merged tree, and
# compute-sanitizer racecheck over `check --quick` (the mbarriers live in
# Q rows' padding and the O staging writes over them after mbarrier.inval).
set -u -o pipefail
what=${1:?usage: bench/exp/mma_bulk.sh prepare|device BUILD [ROUNDS]}
b=${2:?usage: bench/exp/mma_bulk.sh prepare|device BUILD [ROUNDS]}
here=$(cd "$(dirname "$0")" && pwd)
case $what in
  prepare)
    rm -rf ab/base ab/bulk
    mkdir -p ab
    cp -r kernel_templates ab/base
    cp -r kernel_templates ab/bulk
    python3 "$here/mma_bulk.py" ab/bulk || exit 1
    for v in base bulk; do
      rm -rf "$b/test-cache/ab-$v"
      SAGEJIT_TEMPLATE_DIR=$PWD/ab/$v "$b/sagejit" warm --arch sm_90a --family fp16pv \
        --accum fp32,fp16+fp32 --head-dim 32,96,128 --dtype fp16,bf16 \
        --quant per_block,per_warp,per_thread --causal 0,1 --no-progress \
        --cache-dir "$b/test-cache/ab-$v" | head -1 || exit 1
    done
    ../shared/tools/gpu-pack "$b" | tail -2 ;;
  device)
    OUT=${OUT:-/tmp/out}/bulk
    mkdir -p "$OUT"
    OUT=$OUT ROUNDS=${3:-3} \
      CHECK="--family fp16pv --accum fp32,fp16+fp32 --head-dim 32,96,128" \
      BENCH="--family fp16pv --accum fp32 --head-dim 128,96,32 --seq 1024,4096,16384 --causal 0,1 --iters 12 --warmup 3" \
      timeout 330 bash "$here/../ab_templates.sh" "$b" ab/base ab/bulk > "$OUT/out.txt" 2>&1
    echo "bulk rc=$?"
    grep -E "check|attn" "$OUT/out.txt" ;;
  *)
    echo "usage: bench/exp/mma_bulk.sh prepare|device BUILD [ROUNDS]" >&2
    exit 2 ;;
esac
