#!/bin/bash
# bench/exp/s61a_device.sh BUILD -- the sixty-first session's first call:
# (1) the GPU suite on BUILD (BUILD/test-cache/test_gpu warmed for its
# templates) and memcheck over `check --quick` of FP8PV fp32 at D = 64
# (17f7930's causal kernel: TMA tiles, VH, chunked), as s60d_device.sh,
# and racecheck over the same;
# (2) kernel for kernel: issue 3's and 4's D = 128 goal modes, non-causal,
# attention only and end to end with the fused Q (default) and with
# SAGEJIT_QFUSE=0 (Q quantized by quant_qkv, as SageAttention2's
# attention-only time counts it), alternated, two rounds; SDPA-cuDNN last.
set -u
b=${1:?usage: bench/exp/s61a_device.sh BUILD}
OUT=${OUT:-/tmp/out}
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
export SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu
# most important first: the device time left may cut the call short
OUT=$OUT bash bench/gpu_session.sh "$b" test > "$OUT/suite.txt" 2>&1
grep -E "rc=|PASSED|FAILED" "$OUT/suite.txt"; echo "test at ${SECONDS} s"
. "$(dirname "$0")/san_check.sh"
san_check "$b" "$OUT" mem64 memcheck \
  --family fp8pv --head-dim 64 --accum fp32 > "$OUT/san.txt" 2>&1
cat "$OUT/san.txt"
OUT=$OUT bash bench/gpu_session.sh "$b" varlen faults >> "$OUT/suite.txt" 2>&1
san_check "$b" "$OUT" race64 racecheck \
  --family fp8pv --head-dim 64 --accum fp32 >> "$OUT/san.txt" 2>&1
# the kernel-for-kernel rows only while the call has time left for them
rounds="1 2"; [ "$SECONDS" -lt 260 ] || rounds=1; [ "$SECONDS" -lt 340 ] || rounds=""
for r in $rounds; do
  for qf in 1 0; do
    for fa in "fp16pv fp32" "fp8pv fp32+fp16" "wgmma pvi8+splitv"; do
      set -- $fa
      echo "--- round $r qfuse=$qf $1 $2"
      SAGEJIT_QFUSE=$qf timeout 120 "$b/sagejit" bench --family "$1" --accum "$2" --head-dim 128 \
        --seq 1024,4096,16384 --causal 0 2>&1 | grep -E "^ +[0-9]|TOPS|family"
    done
  done
done > "$OUT/kfk.txt" 2>&1
timeout 200 python3 bench/sdpa_baseline.py --head-dim 128 --backends cudnn > "$OUT/sdpa.log" 2>&1
echo "=== kernel for kernel"
cut -c1-160 "$OUT/kfk.txt"
grep sdpa- "$OUT/sdpa.log"
echo "=== verdicts"
grep -E "rc=|cases|PASSED|FAILED|^\[  FAILED|OK \]" "$OUT/suite.txt"
grep -h "max jumps.*fp8pv fp32 " "$OUT/test_gpu.log"
cat "$OUT/san.txt"
echo "done at ${SECONDS} s"
