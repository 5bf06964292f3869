#!/bin/bash
# bench/exp/mma_tma.sh prepare|device BUILD [ROUNDS] -- attn_mma's TMA tiles
# (TMA in sj_attn_mma.cuh, runtime/spec.c mma_tma) in one device call: the
# cp.async form (SAGEJIT_TUNE=tma=0) against the default and against TMA
# wherever the template has it (tma=1), D = 64 and 128, both mma.sync
# families, every mode (forty-seventh session; bench/NOTES.md tma).  The
# first measurement used a throwaway copy of the templates with the same
# copies and swizzle; its table is in NOTES.
#
#   prepare  (CPU machine): the three variants' caches under
#            BUILD/test-cache/ab-kernel_templates*, then gpu-pack.
#            ~2 min on two cores.
#   device   (carry BUILD): `sagejit check` of the default and of tma=1
#            (1056 cases each, ~3.5 min together on an H100), then
#            bench/ab_templates.sh; table in $OUT/ab/out.txt.  With ROUNDS 2
#            the whole call needs ~12 min: past one device call's 10, so
#            give it ROUNDS 1, or narrow BENCH.
set -u -o pipefail
what=${1:?usage: bench/exp/mma_tma.sh prepare|device BUILD [ROUNDS]}
b=${2:?usage: bench/exp/mma_tma.sh prepare|device BUILD [ROUNDS]}
here=$(cd "$(dirname "$0")" && pwd)
modes=fp32,fp16+fp32,fp32+fp16,fp32+fp32,pvi8,pvi8+splitv
case $what in
  prepare)
    for t in tma=0 "" tma=1; do
      n=${t/=/-}
      d=$b/test-cache/ab-kernel_templates${n:+_$n}
      rm -rf "$d"
      SAGEJIT_TUNE=$t SAGEJIT_TEMPLATE_DIR=$PWD/kernel_templates "$b/sagejit" warm \
        --arch sm_90a --family fp16pv,fp8pv --head-dim 64,128 --dtype fp16,bf16 --causal 0,1 \
        --quant per_block,per_warp,per_thread --accum $modes --no-progress \
        --cache-dir "$d" | head -1 || exit 1
    done
    ../shared/tools/gpu-pack "$b" | tail -2 ;;
  device)
    OUT=${OUT:-/tmp/out}/ab
    mkdir -p "$OUT"
    OUT=$OUT ROUNDS=${3:-1} \
      CHECK="--family fp16pv,fp8pv --accum $modes --head-dim 64,128" \
      BENCH="--family fp16pv,fp8pv --accum $modes --head-dim 128,64 --seq 1024,4096,16384 --causal 0,1 --iters 10 --warmup 2" \
      timeout 560 bash "$here/../ab_templates.sh" "$b" kernel_templates@tma=0 kernel_templates \
      kernel_templates@tma=1 > "$OUT/out.txt" 2>&1
    echo "tma rc=$?"
    grep -E "check|attn" "$OUT/out.txt" ;;
  *)
    echo "usage: bench/exp/mma_tma.sh prepare|device BUILD [ROUNDS]" >&2
    exit 2 ;;
esac
