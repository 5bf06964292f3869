#!/bin/bash
# bench/exp/tma_final_device.sh BUILD -- the forty-seventh session's last
# device call: the GPU suite on the tree with TMA tiles (runtime/spec.c
# mma_tma), then issue 3's and 4's tables in one call: our mma families and
# wgmma, SageAttention2's kernels (build-sa2/bin, carried) and SDPA-cuDNN.
set -u
b=${1:?usage: bench/exp/tma_final_device.sh BUILD}
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
cli=$PWD/$b/sagejit
OUT=$OUT timeout 230 bash bench/gpu_session.sh "$b" test varlen faults 2>&1 | grep -vE '^\[ +OK'
export SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu
{
  timeout 120 python3 bench/sdpa_baseline.py --head-dim 128,64 --backends cudnn 2>&1 | grep sdpa-
  timeout 200 "$cli" bench --family fp16pv,fp8pv --accum fp32,fp16+fp32,fp32+fp16,fp32+fp32,pvi8+splitv \
    --head-dim 128,64 --no-progress 2>&1 | grep -E "^ +[0-9]"
  timeout 100 build-sa2/bin/sa2_mma_bench --head-dim 128,64 --causal 0,1 --check 0 2>&1 | grep -E "^sa2"
  timeout 100 "$cli" bench --family wgmma --head-dim 128,64 --no-progress 2>&1 | grep -E "^ +[0-9]"
  timeout 60 build-sa2/bin/sa2_sm90_bench --head-dim 128,64 --seq 1024,4096,16384 --causal 0,1 2>&1 | grep -E "^sa2"
} > "$OUT/tables.log" 2>&1
echo "tables done"; cut -c1-150 "$OUT/tables.log"
