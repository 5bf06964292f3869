#!/bin/bash
# bench/exp/s54_ship_device.sh BUILD -- fifty-fourth session, last device
# call: the tree with `CHUNKED` at non-causal D = 128 on TMA tiles
# (FP16PV fp32; bench/NOTES.md chk128) under the GPU suite, then the
# A/B again (three rounds, ab/base against ab/chk, whose cubin has the
# tree's .text), then the D = 128 table beside SDPA-cuDNN.  Caches
# warmed on the CPU machine: test_gpu, ab-base, ab-chk.
set -u
b=${1:?usage: bench/exp/s54_ship_device.sh BUILD}
OUT=${OUT:-/tmp/out}
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
OUT=$OUT bash bench/gpu_session.sh "$b" info test varlen faults
mkdir -p "$OUT/c"
OUT=$OUT/c CHECK="--quick --family fp16pv --head-dim 128 --accum fp32 --dtype fp16 --quant per_thread" \
BENCH="--family fp16pv --head-dim 128 --accum fp32 --quant per_thread --seq 1024,4096,16384 --causal 0 --iters 20 --warmup 5" \
ROUNDS=3 timeout 120 bench/ab_templates.sh "$b" ab/base ab/chk 2>&1 | tee "$OUT/ab-c.txt"
export SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu
. "$(dirname "$0")/d128_table.sh"
d128_table "$b" "$OUT"
