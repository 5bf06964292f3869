#!/bin/bash
# bench/exp/s56b_device.sh BUILD -- fifty-sixth session, second call.  The
# first (s56_device.sh) found ptxas's --register-usage-level 8 worth +3-5 %
# on FP8PV pvi8+splitv under the causal mask at D = 128, which the tree now
# compiles that way (runtime/spec.c spec_rul).  Here: (A) the same level
# against ptxas's default on pvi8+splitv at every head dim, both masks
# (SAGEJIT_TUNE rul=8 against rul=5, ab/base = HEAD's templates), with the
# full `check` of pvi8+splitv at every head dim on rul=8; (B) FP16PV fp32
# and WGMMA's default at non-causal D = 128 again, three rounds (the first
# call: FP16PV -0.4 to +0.8 %, WGMMA 4K +4 % against a base that ran
# below its own table); (C) the GPU suite on the tree; (D) while the call
# has time (LIMIT seconds), memcheck over `check --quick` of the new
# kernel.  Caches warmed on the CPU machine: ab-base_rul-5, ab-base_rul-8,
# test_gpu.
set -u
b=${1:?usage: bench/exp/s56b_device.sh BUILD}
OUT=${OUT:-/tmp/out}
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
mkdir -p "$OUT/a" "$OUT/b"
OUT=$OUT/a CHECK="--family fp8pv --accum pvi8+splitv --head-dim 32,64,96,128,256" \
BENCH="--family fp8pv --head-dim 128,32,64,96,256 --accum pvi8+splitv --quant per_thread --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
ROUNDS=2 timeout 300 bench/ab_templates.sh "$b" ab/base@rul=5 ab/base@rul=8 2>&1 | tee "$OUT/ab-a.txt"
grep -E "^check|worst|fail" "$OUT/a/check-base_rul-8.log" | tail -4
OUT=$OUT/b CHECK="--quick --family fp16pv,wgmma --head-dim 128 --dtype fp16" \
BENCH="--family fp16pv,wgmma --head-dim 128 --quant per_thread --seq 1024,4096,16384 --causal 0 --iters 20 --warmup 5" \
ROUNDS=3 timeout 150 bench/ab_templates.sh "$b" ab/base@rul=5 ab/base@rul=8 2>&1 | tee "$OUT/ab-b.txt"
echo "A/B done at ${SECONDS} s"
OUT=$OUT bash bench/gpu_session.sh "$b" info test varlen faults 2>&1 | tail -30
echo "suite done at ${SECONDS} s"
if [ "$SECONDS" -gt $((${LIMIT:-560} - 60)) ]; then
  echo "memcheck: skipped at ${SECONDS} s"
  exit 0
fi
. "$(dirname "$0")/san_check.sh"
SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu san_check "$b" "$OUT" mem128c memcheck \
  --family fp8pv --head-dim 128 --accum pvi8+splitv
echo "done at ${SECONDS} s"
