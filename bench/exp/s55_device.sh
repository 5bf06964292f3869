#!/bin/bash
# bench/exp/s55_device.sh BUILD -- fifty-fifth session's A/B, row sums of
# P off the tensor core.  ab/hs (HSUM): the step's row sums as f16x2 adds
# of the packed P (the P that P.V multiplies), per lane, instead of one
# mma per k-chunk and m-tile or FADDs of the fp32 P, wherever P is fp16
# pairs: FP16PV fp32 with fp16 input (every D, both masks) and FP8PV's VH
# modes (fp32, fp32+fp32, causal fp32+fp16 at D = 128).  ab/fsum2: FADD
# row sums of the fp32 P in every e4m3 mode at D = 128 (the denominator
# then sums P before its e4m3 rounding).  ab/pvo: the fp32 mode's P.V
# loop channel pair by channel pair (FP16PV causal D = 128, FP8PV fp32).
# ab/hs@vh=1: hs with VH forced (so also fp32+fp16 without the mask,
# where VH lost 3.5-4 % with 112 bytes of spills; 40 with HSUM).
# Baseline ab/chk (HEAD's code).  (A) FP16PV fp32, D = 128 and 64.
# (B) FP8PV fp32+fp16 and fp32+fp32, D = 128.  (C) the full `check` at
# D = 128 on the candidates and the tree (worst and mean relative L2 per
# cell kind), and hs's FP16PV at D = 32, 64, 96, 256.  (D) long_accuracy
# (Gaussian and sharp data, 4K) on the three.  Caches: ab-chk,
# ab-hs, ab-hs_vh-1, ab-pvo, ab-fsum2.
set -u
b=${1:?usage: bench/exp/s55_device.sh BUILD}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/a" "$OUT/b"
OUT=$OUT/a CHECK="--quick --family fp16pv --head-dim 128 --accum fp32 --dtype fp16 --quant per_thread" \
BENCH="--family fp16pv --head-dim 128,64 --accum fp32 --quant per_thread --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
ROUNDS=3 timeout 220 bench/ab_templates.sh "$b" ab/chk ab/hs ab/pvo 2>&1 | tee "$OUT/ab-a.txt"
OUT=$OUT/b CHECK="--quick --family fp8pv --head-dim 128 --accum fp32+fp16,fp32+fp32 --dtype fp16 --quant per_thread" \
BENCH="--family fp8pv --head-dim 128 --accum fp32+fp16,fp32+fp32 --quant per_thread --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
ROUNDS=3 timeout 200 bench/ab_templates.sh "$b" ab/chk ab/fsum2 ab/hs ab/hs@vh=1 2>&1 | tee "$OUT/ab-b.txt"
for v in chk hs fsum2; do
  SAGEJIT_TEMPLATE_DIR=$PWD/ab/$v SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/ab-$v timeout 90 \
    "$b/sagejit" check --family fp16pv,fp8pv --head-dim 128 --accum fp32,fp32+fp16,fp32+fp32 --json \
    > "$OUT/check-full-$v.log" 2>&1
  echo "check full $v: rc=$?"
  python3 - "$OUT/check-full-$v.log" "$v" <<'PY'
import collections, json, sys
last = [l for l in open(sys.argv[1]) if l.startswith("{")]
if not last:
    sys.exit(print(sys.argv[2], "no json"))
j = json.loads(last[-1])
print(sys.argv[2], "cases", j["cases"], "passed", j["passed"], "failed", j["failed"])
g = collections.defaultdict(list)
for r in j["results"]:
    if r["status"] == "SKIP":
        continue
    key = "%s %s %s c%d" % (r["family"], r["accum"], r["dtype"], r["causal"])
    g[key].append((r.get("rel_l2", 9.0), r["status"]))
for k in sorted(g):
    v = [x for x, _ in g[k]]
    print("  %-34s n %3d worst %.4e mean %.4e fails %d" % (k, len(v), max(v), sum(v) / len(v),
          sum(s != "PASS" for _, s in g[k])))
PY
done
# hs at the other head dims (fp16 input, both masks)
SAGEJIT_TEMPLATE_DIR=$PWD/ab/hs SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/ab-hs timeout 90 \
  "$b/sagejit" check --family fp16pv --head-dim 32,64,96,256 --accum fp32 --dtype fp16 \
  > "$OUT/check-hs-dims.log" 2>&1
echo "check hs D 32-256: rc=$? $(tail -1 "$OUT/check-hs-dims.log")"
export SAGEJIT_LIBRARY=$PWD/$b/libsagejit.so
for v in chk fsum2 hs; do
  echo "--- long_accuracy $v"
  SAGEJIT_TEMPLATE_DIR=$PWD/ab/$v SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/ab-$v timeout 60 \
    python3 bench/long_accuracy.py --seq 4096 --data gauss,sharp \
    --modes fp16pv:fp32,fp8pv:fp32+fp16,fp8pv:fp32+fp32 2>&1 | tail -24
done
