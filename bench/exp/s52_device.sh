#!/bin/bash
# bench/exp/s52_device.sh BUILD -- fifty-second session, one device call:
# (1) the er96 row: bench/exp/er96.patch applied to kernel_templates (and
# built into BUILD) against ab/base (HEAD's templates), FP16PV fp32 at
# D = 96 and 256; (2) at D = 128, FP16PV fp32: ab/tcs (row sums on the
# tensor core under the causal mask too: m3's choice re-timed on the TMA
# kernels) and four TMA stages (`stages=4`) against ab/base; (3)
# bench/exp/gp_device.sh (the two-level modes' P.V channel group).  ab/ is
# git-ignored: carry it.  Caches warmed on the CPU machine: ab-base,
# ab-tcs, ab-base_stages-4, ab-kernel_templates, ab-gp1, ab-gp4.
set -u
b=${1:?usage: bench/exp/s52_device.sh BUILD}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
mkdir -p "$OUT/er96" "$OUT/d128"
OUT=$OUT/er96 CHECK="--quick --family fp16pv --head-dim 96,256 --accum fp32" \
BENCH="--family fp16pv --head-dim 96,256 --accum fp32 --seq 1024,4096,16384 --causal 0,1 --iters 10 --warmup 3" \
ROUNDS=2 bench/ab_templates.sh "$b" ab/base kernel_templates 2>&1 | tee "$OUT/ab-er96.txt"
OUT=$OUT/d128 CHECK="--quick --family fp16pv --head-dim 128 --accum fp32" \
BENCH="--family fp16pv --head-dim 128 --accum fp32 --seq 1024,4096,16384 --causal 0,1 --iters 10 --warmup 3" \
ROUNDS=2 bench/ab_templates.sh "$b" ab/base ab/tcs ab/base@stages=4 2>&1 | tee "$OUT/ab-d128.txt"
mkdir -p "$OUT/gp"
OUT=$OUT/gp bash bench/exp/gp_device.sh "$b"
