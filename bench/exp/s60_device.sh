#!/bin/bash
# bench/exp/s60_device.sh BUILD -- the sixtieth session's A/B call, FP8PV's
# fp32 mode (the chunked VH kernel of c8 / c8x) on the H100:
# (a) VH, hence CHUNKED, forced on (SAGEJIT_TUNE vh=1) where the default
#     has neither: D = 32 both masks and causal D = 64 (non-causal D = 64,
#     the default's VH kernel, is the control);
# (b) two TMA stages at D = 128 (stages=2,tma=1), as FP16PV's chunked
#     kernel there runs, and ab/nd2 (DEFER's exps before the vote's branch
#     for two 16-key chunks instead of one; FP8PV only) at D = 64 / 96 /
#     128.  Causal nd2 kernels are the tree's (no vote there): controls.
# Caches warmed on the CPU machine in BUILD/test-cache/ab-*.  Verdicts last.
set -u
b=${1:?usage: bench/exp/s60_device.sh BUILD}
OUT=${OUT:-/tmp/out}
CK="--quick --family fp8pv --accum fp32 --head-dim 32,64,96,128"
B="--family fp8pv --accum fp32 --quant per_thread --dtype fp16 --seq 1024,4096,16384 --iters 20 --warmup 5"
mkdir -p "$OUT/a" "$OUT/b"
OUT=$OUT/a CHECK="$CK" BENCH="$B --head-dim 32,64 --causal 0,1" ROUNDS=2 \
  timeout 200 bench/ab_templates.sh "$b" ab/base ab/base@vh=1 > "$OUT/ab-a.txt" 2>&1
echo "a done at ${SECONDS} s"
OUT=$OUT/b CHECK="$CK" BENCH="$B --head-dim 64,96,128 --causal 0,1" ROUNDS=2 \
  timeout 330 bench/ab_templates.sh "$b" ab/base ab/base@stages=2,tma=1 ab/nd2 > "$OUT/ab-b.txt" 2>&1
echo "b done at ${SECONDS} s"
echo "=== verdicts"
grep -hE "^check|^fp|^NVIDIA|ab_templates" "$OUT/ab-a.txt" "$OUT/ab-b.txt"
echo "done at ${SECONDS} s"
