#!/bin/bash
# bench/exp/tma_confirm_device.sh prepare|device BUILD [ROUNDS] -- three
# rounds of the TMA cells that the forty-seventh session decided on one
# round (bench/NOTES.md tma): FP8PV pvi8 and fp32+fp16 (and fp32) at D = 64
# and 128, FP16PV fp32 at D = 64 and 128, the cp.async form (tma=0)
# against TMA everywhere the template has it (tma=1); fp16 only.
#   prepare  (CPU machine): the two variants' caches, gpu-pack (~1 min)
#   device   (carry BUILD): ab_templates.sh, ~3 min on an H100 with ROUNDS 3
set -u -o pipefail
what=${1:?usage: bench/exp/tma_confirm_device.sh prepare|device BUILD [ROUNDS]}
b=${2:?usage: bench/exp/tma_confirm_device.sh prepare|device BUILD [ROUNDS]}
here=$(cd "$(dirname "$0")" && pwd)
opts="--family fp16pv,fp8pv --accum fp32,fp32+fp16,pvi8 --head-dim 128,64"
case $what in
  prepare)
    for t in tma=0 tma=1; do
      d=$b/test-cache/ab-kernel_templates_${t/=/-}
      rm -rf "$d"
      # shellcheck disable=SC2086
      SAGEJIT_TUNE=$t SAGEJIT_TEMPLATE_DIR=$PWD/kernel_templates "$b/sagejit" warm \
        --arch sm_90a $opts --dtype fp16 --causal 0,1 --quant per_thread --no-progress \
        --cache-dir "$d" | head -1 || exit 1
    done
    ../shared/tools/gpu-pack "$b" | tail -2 ;;
  device)
    OUT=${OUT:-/tmp/out}/confirm
    mkdir -p "$OUT"
    OUT=$OUT ROUNDS=${3:-3} CHECK="--family fp8pv --accum pvi8 --head-dim 128 --dtype fp16 --quick" \
      BENCH="$opts --seq 1024,4096,16384 --causal 0,1 --iters 10 --warmup 2" \
      timeout 260 bash "$here/../ab_templates.sh" "$b" kernel_templates@tma=0 \
      kernel_templates@tma=1 > "$OUT/out.txt" 2>&1
    echo "confirm rc=$?"
    grep -E "check|attn" "$OUT/out.txt" ;;
  *)
    echo "usage: bench/exp/tma_confirm_device.sh prepare|device BUILD [ROUNDS]" >&2
    exit 2 ;;
esac
