#!/bin/bash
# bench/exp/s57_device.sh BUILD -- fifty-seventh session: VOTE1 (ab/vf:
# each step votes across the warp whether any lane's own row max passes
# its reference max + TAU, and skips the quad's max shuffles, the o_scale
# exps and the rescale's vote when none does; every non-INT8-P mode) and
# DEFER (ab/df: VOTE1, and the chunked step's first chunk of exps before
# the vote's branch) against ab/base (HEAD's templates).  Both are meant
# to be bit-identical to the base: (0) `check --json` of base, vf and df
# on the same seeds, relative L2 compared case by case.  (A) FP16PV fp32
# D = 128, three rounds.  (B) FP8PV fp32+fp16, fp32+fp32, pvi8+splitv
# (its split V body votes) at D = 128, base against vf, two rounds.  (C)
# FP16PV fp32 at D = 32, 64, 96, two rounds.  Caches ab-base, ab-vf,
# ab-df.  Results print to stdout.
set -u
b=${1:?usage: bench/exp/s57_device.sh BUILD}
OUT=${OUT:-/tmp/out}
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
mkdir -p "$OUT/a" "$OUT/b" "$OUT/c"
for v in base vf df; do
  SAGEJIT_TEMPLATE_DIR=$PWD/ab/$v SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/ab-$v timeout 120 \
    "$b/sagejit" check --family fp16pv,fp8pv --head-dim 128 --accum fp32,fp32+fp16,fp32+fp32 \
    --dtype fp16 --json -q > "$OUT/chk-$v.json" 2> "$OUT/chk-$v.err"
  echo "check $v rc=$? $(tail -c 300 "$OUT/chk-$v.err")"
done
python3 "$(dirname "$0")/same_json.py" "$OUT" base vf df
echo "checks done at ${SECONDS} s"
OUT=$OUT/a CHECK="--quick --family fp16pv --head-dim 128 --accum fp32 --dtype fp16" \
BENCH="--family fp16pv --head-dim 128 --accum fp32 --quant per_thread --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
ROUNDS=3 timeout 220 bench/ab_templates.sh "$b" ab/base ab/vf ab/df 2>&1 | tee "$OUT/ab-a.txt"
echo "A done at ${SECONDS} s"
OUT=$OUT/b CHECK="--quick --family fp8pv --head-dim 128 --accum fp32+fp16,pvi8+splitv --dtype fp16" \
BENCH="--family fp8pv --head-dim 128 --accum fp32+fp16,fp32+fp32,pvi8+splitv --quant per_thread --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
ROUNDS=2 timeout 200 bench/ab_templates.sh "$b" ab/base ab/vf 2>&1 | tee "$OUT/ab-b.txt"
echo "B done at ${SECONDS} s"
if [ "$SECONDS" -gt $((${LIMIT:-570} - 100)) ]; then
  echo "C: skipped at ${SECONDS} s"
  exit 0
fi
OUT=$OUT/c CHECK="--quick --family fp16pv --head-dim 64 --accum fp32 --dtype fp16" \
BENCH="--family fp16pv --head-dim 32,64,96 --accum fp32 --quant per_thread --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
ROUNDS=2 timeout $((${LIMIT:-570} - SECONDS - 5)) bench/ab_templates.sh "$b" ab/base ab/vf ab/df 2>&1 | tee "$OUT/ab-c.txt"
echo "done at ${SECONDS} s"
