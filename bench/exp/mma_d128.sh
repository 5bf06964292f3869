#!/bin/bash
# bench/exp/mma_d128.sh prepare|device BUILD [ROUNDS] -- three questions
# about FP16PV at D = 96 and 128 on the H100, one device call (forty-sixth
# session), each a variant of the templates against the tree:
#
# fmax: the row max on the offset scores' bits (tree_imax, m6) against
# the float max chain.
# m6 chose tree_imax on an H200 (FP16PV +0-14 %).  The forty-third
# session's ncu comparison with SageAttention2's sm80 kernel at D = 128
# found its extra instructions are float work (FMNMX, I2FP) and ours
# integer (IADD3, VIMNMX3), with more fixed-latency ("wait") stalls on
# ours: the variant `fmax` takes the float chain for FP16PV at D = 96 and
# 128 (attn_mma's IMAX), every other kernel unchanged.
#
# l2h: a ceiling, wrong output.  With three stages each CTA copies its
# K/V tiles only in every other round of stages and computes the other
# rounds on the stale buffers (the same instructions, half the L2->SMEM
# traffic), as the wgmma family's l2 row did.  If it gains, 256-row CTAs
# (eight warps reading each K/V tile once) are worth building; the wgmma
# family's cost was energy under the 700 W cap, not bandwidth.
#
# c256: those 256-row CTAs, for non-causal D = 128 only (bench/exp/
# mma_c256.py: timed through SAGEJIT_TUNE=warp_q=16, two stages).
#
#   prepare  (CPU machine): ab/fmax, ab/l2h and ab/c256 beside ab/base
#            (bench/exp/mma_ksx.sh prepare makes ab/base; this adds its
#            D = 96 / 128 kernels), their caches, gpu-pack.  ~2 min on
#            two cores.
#   device   (carry BUILD and ab): `sagejit check` of each variant, then
#            bench/ab_templates.sh; the table in $OUT/d128/out.txt
#            (l2h's check fails by design), c256's in
#            $OUT/d128/c256/out.txt.  ~5 min on an H100 with ROUNDS 3.
set -u -o pipefail
what=${1:?usage: bench/exp/mma_d128.sh prepare|device BUILD [ROUNDS]}
b=${2:?usage: bench/exp/mma_d128.sh prepare|device BUILD [ROUNDS]}
case $what in
  prepare)
    [ -d ab/base ] || { echo "mma_d128: run bench/exp/mma_ksx.sh prepare first" >&2; exit 1; }
    rm -rf ab/fmax ab/l2h ab/c256
    cp -r kernel_templates ab/fmax
    cp -r kernel_templates ab/l2h
    cp -r kernel_templates ab/c256
    python3 bench/exp/mma_c256.py ab/c256 || exit 1
    python3 - ab/fmax/sj_attn_mma.cuh <<'PY' || exit 1
import sys
p = sys.argv[1]
s = open(p).read()
old = "constexpr bool IMAX = !(F8 && D <= 64 && !CAUSAL);"
new = "constexpr bool IMAX = !(F8 && D <= 64 && !CAUSAL) && !(!F8 && (D == 96 || D == 128));"
if s.count(old) != 1:
    sys.exit("mma_d128: the template no longer has: " + old)
open(p, "w").write(s.replace(old, new))
PY
    python3 - ab/l2h/sj_attn_mma.cuh <<'PY' || exit 1
import sys
p = sys.argv[1]
s = open(p).read()
for old, new in (
    ("  template <bool FULL> __device__ __forceinline__ void load_impl(u8 *sK, u8 *sV) {",
     "  // l2h: the pointers of load_impl, no copies\n"
     "  __device__ __forceinline__ void advance() {\n"
     "    if (KS_SMEM)\n"
     "      ks += 16;\n"
     "    k += BLK_K * D;\n"
     "    v += F8 ? (i64)BLK_K : BLK_K * v_pitch;\n"
     "    rows_left -= BLK_K;\n"
     "  }\n"
     "  template <bool FULL> __device__ __forceinline__ void load_impl(u8 *sK, u8 *sV) {"),
    ("        ld.load(sK0 + ((j + 2) % STAGES) * S::K_BYTES, sV0 + ((j + 2) % STAGES) * S::V_BYTES);",
     "        if ((((j + 2) / STAGES) & 1) == 0)\n"
     "          ld.load(sK0 + ((j + 2) % STAGES) * S::K_BYTES, sV0 + ((j + 2) % STAGES) * S::V_BYTES);\n"
     "        else\n"
     "          ld.advance();"),
):
    if s.count(old) != 1:
        sys.exit("mma_d128: the template no longer has: " + old.strip())
    s = s.replace(old, new)
open(p, "w").write(s)
PY
    rm -rf "$b/test-cache/ab-fmax" "$b/test-cache/ab-l2h"
    for v in base fmax l2h; do
      SAGEJIT_TEMPLATE_DIR=$PWD/ab/$v "$b/sagejit" warm --arch sm_90a --family fp16pv \
        --accum fp32 --head-dim 96,128 --dtype fp16 --quant per_thread --causal 0,1 \
        --no-progress --cache-dir "$b/test-cache/ab-$v" | head -1 || exit 1
    done
    rm -rf "$b/test-cache/ab-c256_warp_q-16"
    SAGEJIT_TUNE=warp_q=16 SAGEJIT_TEMPLATE_DIR=$PWD/ab/c256 "$b/sagejit" warm --arch sm_90a \
      --family fp16pv --accum fp32 --head-dim 128 --dtype fp16,bf16 --quant per_thread \
      --causal 0,1 --no-progress --cache-dir "$b/test-cache/ab-c256_warp_q-16" | head -1 || exit 1
    SAGEJIT_TEMPLATE_DIR=$PWD/ab/base "$b/sagejit" warm --arch sm_90a --family fp16pv \
      --accum fp32 --head-dim 128 --dtype fp16,bf16 --quant per_thread --causal 0,1 \
      --no-progress --cache-dir "$b/test-cache/ab-base" | head -1 || exit 1
    ../shared/tools/gpu-pack "$b" | tail -2 ;;
  device)
    OUT=${OUT:-/tmp/out}/d128
    mkdir -p "$OUT"
    OUT=$OUT ROUNDS=${3:-3} \
      CHECK="--family fp16pv --accum fp32 --head-dim 96,128 --dtype fp16 --quant per_thread" \
      BENCH="--family fp16pv --accum fp32 --head-dim 128,96 --seq 1024,4096,16384 --causal 0,1 --iters 12 --warmup 3" \
      timeout 280 bash "$(dirname "$0")/../ab_templates.sh" "$b" ab/base ab/fmax ab/l2h > "$OUT/out.txt" 2>&1
    echo "d128 rc=$?"
    grep -E "check|attn" "$OUT/out.txt"
    mkdir -p "$OUT/c256"
    OUT=$OUT/c256 ROUNDS=${3:-3} \
      CHECK="--family fp16pv --accum fp32 --head-dim 128 --quant per_thread" \
      BENCH="--family fp16pv --accum fp32 --head-dim 128 --seq 1024,4096,16384 --causal 0 --iters 12 --warmup 3" \
      timeout 150 bash "$(dirname "$0")/../ab_templates.sh" "$b" ab/base ab/c256@warp_q=16 > "$OUT/c256/out.txt" 2>&1
    echo "c256 rc=$?"
    grep -E "check|attn" "$OUT/c256/out.txt" ;;
  *)
    echo "usage: bench/exp/mma_d128.sh prepare|device BUILD [ROUNDS]" >&2
    exit 2 ;;
esac
