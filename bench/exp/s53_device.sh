#!/bin/bash
# bench/exp/s53_device.sh BUILD -- fifty-third session: (1) the SASS of the
# FP8PV D = 128 TMA kernels (fp32+fp16, fp32+fp32, non-causal) with and
# without VH (ab/sass/*.cubin, written on the CPU machine); (2) VH (ab/vh,
# FP8PV's e4m3 P.V as fp16 mma on sm_90, V converted once per CTA and
# tile) and four channel pairs per P.V pass (ab/gp4b) against the tree's
# templates (ab/base2), three rounds; (3) bench/exp/gpx_device.sh.
set -u
b=${1:?usage: bench/exp/s53_device.sh BUILD}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/sass" "$OUT/ab"
for f in ab/sass/*.cubin; do
  n=$(basename "$f" .cubin)
  cuobjdump -sass "$f" > "$OUT/sass/$n.sass" 2>&1
  echo "$n: $(grep -cE '^\s+/\*[0-9a-f]{4}\*/' "$OUT/sass/$n.sass") instructions;" \
    "$(grep -oE '(F2FP|HMMA|IMMA|LDSM|STS|LDS|BAR|SYNCS|MUFU|FFMA|FADD|HADD2|PRMT)[A-Z0-9._]*' "$OUT/sass/$n.sass" |
      sed 's/\..*//' | sort | uniq -c | tr '\n' ' ')"
done | tee "$OUT/sass/counts.txt"
OUT=$OUT/ab CHECK="--family fp8pv --head-dim 128 --accum fp32+fp16,fp32+fp32" \
BENCH="--family fp8pv --head-dim 128 --accum fp32+fp16,fp32+fp32 --quant per_thread --seq 1024,4096,16384 --causal 0,1 --iters 20 --warmup 5" \
ROUNDS=3 timeout 330 bench/ab_templates.sh "$b" ab/base2 ab/vh ab/gp4b 2>&1 | tee "$OUT/ab-vh.txt"
OUT=$OUT/gpx timeout 220 bench/exp/gpx_device.sh "$b"
