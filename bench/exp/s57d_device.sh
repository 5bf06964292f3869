#!/bin/bash
# bench/exp/s57d_device.sh BUILD -- fifty-seventh session, fourth call:
# the second shipped form (ab/ship2: also DEFER in the unchunked FP16PV
# fp32 steps at non-causal D = 64, 96 and D = 256, and in FP8PV
# fp32+fp16 under the causal mask at D = 128, where ab/du gained) against
# ab/ship (the first).  (0) `check --json` of both over those kernels,
# compared field for field.  (A) the changed cells, fp16 and bf16, two
# rounds.  (B) the GPU suite on BUILD (which embeds ship2's templates;
# BUILD/test-cache/test_gpu warmed for them).  (C) compute-sanitizer
# memcheck and racecheck over `check --quick` of the changed kernels.
# Verdicts print last, on stdout.
set -u
b=${1:?usage: bench/exp/s57d_device.sh BUILD}
OUT=${OUT:-/tmp/out}
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
mkdir -p "$OUT/a1" "$OUT/a2" "$OUT/a3"
for v in ship ship2; do
  SAGEJIT_TEMPLATE_DIR=$PWD/ab/$v SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/ab-$v timeout 150 \
    "$b/sagejit" check --family fp16pv,fp8pv --head-dim 64,96,128,256 --accum fp32,fp32+fp16 \
    --dtype fp16 --json -q > "$OUT/chk-$v.json" 2> "$OUT/chk-$v.err"
  echo "check $v rc=$?"
done
python3 "$(dirname "$0")/same_json.py" "$OUT" ship ship2 > "$OUT/ident.txt"
cat "$OUT/ident.txt"
OUT=$OUT/a1 CHECK="--quick --family fp16pv --head-dim 64 --accum fp32" \
BENCH="--family fp16pv --head-dim 64,96 --accum fp32 --quant per_thread --dtype fp16,bf16 --seq 1024,4096,16384 --causal 0 --iters 20 --warmup 5" \
ROUNDS=2 timeout 120 bench/ab_templates.sh "$b" ab/ship ab/ship2 > "$OUT/ab-a1.txt" 2>&1
OUT=$OUT/a2 CHECK="--quick --family fp16pv --head-dim 256 --accum fp32" \
BENCH="--family fp16pv --head-dim 256 --accum fp32 --quant per_thread --dtype fp16,bf16 --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
ROUNDS=2 timeout 150 bench/ab_templates.sh "$b" ab/ship ab/ship2 > "$OUT/ab-a2.txt" 2>&1
OUT=$OUT/a3 CHECK="--quick --family fp8pv --head-dim 128 --accum fp32+fp16" \
BENCH="--family fp8pv --head-dim 128 --accum fp32+fp16 --quant per_thread --dtype fp16,bf16 --seq 1024,4096,16384 --causal 1 --iters 20 --warmup 5" \
ROUNDS=2 timeout 100 bench/ab_templates.sh "$b" ab/ship ab/ship2 > "$OUT/ab-a3.txt" 2>&1
echo "A done at ${SECONDS} s"
OUT=$OUT bash bench/gpu_session.sh "$b" test varlen faults > "$OUT/suite.txt" 2>&1
echo "suite done at ${SECONDS} s"
. "$(dirname "$0")/san_check.sh"
{
  if [ "$SECONDS" -lt $((${LIMIT:-560} - 70)) ]; then
    for hd in 64 256; do
      SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu san_check "$b" "$OUT" mem$hd memcheck \
        --family fp16pv --head-dim $hd --accum fp32
    done
    SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu san_check "$b" "$OUT" mem8 memcheck \
      --family fp8pv --head-dim 128 --accum fp32+fp16
    SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu san_check "$b" "$OUT" race64 racecheck \
      --family fp16pv --head-dim 64 --accum fp32
  else
    echo "sanitizers: skipped at ${SECONDS} s"
  fi
} > "$OUT/san.txt" 2>&1
echo "=== verdicts"
cat "$OUT/ident.txt"
grep -hE "^check|^fp|^NVIDIA" "$OUT/ab-a1.txt" "$OUT/ab-a2.txt" "$OUT/ab-a3.txt"
grep -E "rc=|cases|PASSED|FAILED|^\[  FAILED|OK \]" "$OUT/suite.txt"
cat "$OUT/san.txt"
echo "done at ${SECONDS} s"
