#!/bin/bash
# bench/exp/tma32_default_device.sh BUILD -- fiftieth session, second device
# call: attn_mma's TMA tiles as the D = 32 default on sm_90 (the tma32 cells
# of runtime/spec.c mma_tma) under the GPU suite and compute-sanitizer
# memcheck / racecheck over `check --quick --head-dim 32` of the modes that
# take it; then the D = 128 table of issues 3 and 4 (sagejit bench, every
# family's modes of the anchors) beside SDPA-cuDNN in the same call.
set -u
b=${1:?usage: bench/exp/tma32_default_device.sh BUILD}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
OUT=$OUT bash bench/gpu_session.sh "$b" info test varlen faults
. "$(dirname "$0")/san_check.sh"
export SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu
san_check "$b" "$OUT" mem-fp16pv memcheck --head-dim 32 --family fp16pv --accum fp16+fp32
san_check "$b" "$OUT" mem-fp8pv memcheck --head-dim 32 --family fp8pv --accum fp32,fp32+fp32,pvi8,pvi8+splitv
san_check "$b" "$OUT" race-fp16pv racecheck --head-dim 32 --family fp16pv --accum fp16+fp32
san_check "$b" "$OUT" race-fp8pv racecheck --head-dim 32 --family fp8pv --accum fp32+fp32,pvi8+splitv
for fa in "fp16pv fp32" "fp8pv fp32+fp16,fp32+fp32,pvi8+splitv" "wgmma pvi8+splitv"; do
  set -- $fa
  timeout 200 "$b/sagejit" bench --family "$1" --accum "$2" --head-dim 128 --seq 1024,4096,16384 \
    --causal 0,1 > "$OUT/bench-$1.log" 2>&1
  echo "bench $1 rc=$?"; cut -c1-200 "$OUT/bench-$1.log"
done
timeout 200 python3 bench/sdpa_baseline.py --head-dim 128 --backends cudnn > "$OUT/sdpa.log" 2>&1
echo "sdpa rc=$?"; grep sdpa- "$OUT/sdpa.log"
