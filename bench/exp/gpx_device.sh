#!/bin/bash
# bench/exp/gpx_device.sh BUILD -- fifty-second session, after the gp
# row: one channel pair per P.V pass (PvGroup's TARGET 1 for 32-row warps,
# ab/gpx) against the tree (ab/base2, with GP_ONE) where the gp row did
# not look: FP8PV fp32+fp16, fp32+fp32, pvi8+splitv, pvi8 and FP16PV
# fp16+fp32 at D = 64 and 96, and pvi8 alone at D = 128; 4K and 16K.
# Written and warmed, not run (the session's device time went to
# refused starts).  ab/ is git-ignored: carry it; ab/base2 is a copy of
# kernel_templates at 1f6d488, ab/gpx the same with TARGET 1.  Caches
# warmed on the CPU machine: ab-base2, ab-gpx (fp16, per_thread: the
# granularity is an argument).
set -u
b=${1:?usage: bench/exp/gpx_device.sh BUILD}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/a" "$OUT/b"
OUT=$OUT/a CHECK="--quick --family fp8pv,fp16pv --head-dim 64 --accum fp32+fp16,fp32+fp32,pvi8+splitv,pvi8,fp16+fp32" \
BENCH="--family fp8pv,fp16pv --head-dim 64,96 --accum fp32+fp16,fp32+fp32,pvi8+splitv,pvi8,fp16+fp32 --quant per_thread --seq 4096,16384 --causal 0,1 --iters 10 --warmup 3" \
ROUNDS=2 bench/ab_templates.sh "$b" ab/base2 ab/gpx 2>&1 | tee "$OUT/ab-gpx.txt"
OUT=$OUT/b CHECK="--quick --family fp8pv --head-dim 128 --accum pvi8" \
BENCH="--family fp8pv --head-dim 128 --accum pvi8 --quant per_thread --seq 4096,16384 --causal 0,1 --iters 10 --warmup 3" \
ROUNDS=2 bench/ab_templates.sh "$b" ab/base2 ab/gpx 2>&1 | tee "$OUT/ab-gpx128.txt"
