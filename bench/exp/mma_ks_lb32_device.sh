#!/bin/bash
# bench/exp/mma_ks_lb32_device.sh BUILD [ROUNDS] -- attn_mma changes
# prepared in the forty-third session, A/B against the templates they
# patch (one device call, ~4 min on an H100 with warmed caches):
#
# ks  (bench/exp/mma_kscale_early.patch): outside the LEAN kernels (FP16PV
#     D = 128 / 96, every FP8PV kernel), each tile's k_scale is loaded at
#     the top of the loop, before the cp.async wait, the barrier and the
#     next tiles' copies, instead of after them.  ncu (mma_vs_sa2, FP16PV
#     D = 128, 4K) put 2.4 % of all stall samples on the branch between
#     the masked and the unmasked step, waiting on that load (long
#     scoreboard).  Unlike m11's "a tile ahead" (−3 to −4 % at D = 128),
#     the value is live only across the barrier and the copy issue.
#     ptxas -v sm_90a: FP16PV D = 128 non-causal no spills either way,
#     causal 40 / 52 -> 60 / 60 bytes, FP8PV fp32+fp16 20 / 36 -> 28 / 36,
#     FP8PV pvi8+splitv 208 / 240 -> 168 / 188.  Prediction: +1-2 %.
# lb32 (FP8PV pvi8+splitv at D = 32 bounded to three CTAs) ran in the
#     forty-third session (+10 to +16 %) and is shipped (a8cfe26); this
#     script now times ks alone.  Measured there, one call, against the
#     templates before a8cfe26: FP8PV fp32 D = 128 +10 % non-causal but
#     -2 to -3 % causal, pvi8+splitv D = 128 -2 %, FP16PV D = 128 -1.1 to
#     +1.3 %, pvi8+splitv D = 32 +5 to +10 % (without the bound); rerun it
#     on the shipped tree before deciding anything.
#
# On the CPU machine first (NVRTC; saves the device ~2 min of compiles):
#   cmake --build build -j2 && ../shared/tools/gpu-pack build
#   for v in base ks; do rm -rf ab/$v; cp -r kernel_templates ab/$v; done
#   patch -d ab/ks -p1 < bench/exp/mma_kscale_early.patch
#   for v in base ks; do SAGEJIT_TEMPLATE_DIR=$PWD/ab/$v build/sagejit warm \
#     --arch sm_90a --family fp16pv,fp8pv --accum fp32,fp32+fp16,pvi8+splitv \
#     --head-dim 128,96,64,32 --dtype fp16 --quant per_thread \
#     --cache-dir build/test-cache/ab-$v; done
# then, carrying build and ab: bench/exp/mma_ks_lb32_device.sh build
# The table (each cell's runs, change against base) is $OUT/ab_table.txt.
set -u
b=${1:?usage: bench/exp/mma_ks_lb32_device.sh BUILD [ROUNDS]}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export OUT
CHECK="--family fp16pv,fp8pv --accum fp32,fp32+fp16,pvi8+splitv --head-dim 32,128 --dtype fp16 --quant per_thread" \
BENCH="--family fp16pv,fp8pv --accum fp32,fp32+fp16,pvi8+splitv --head-dim 128,96,64,32 --seq 1024,4096,16384 --causal 0,1 --iters 15 --warmup 3" \
ROUNDS=${2:-2} "$(dirname "$0")/../ab_templates.sh" "$b" ab/base ab/ks > "$OUT/ab_table.txt" 2>&1
echo "ab_templates rc=$?"
tail -80 "$OUT/ab_table.txt"
