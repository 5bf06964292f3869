#!/bin/bash
# bench/exp/mma_kss_device.sh BUILD [ROUNDS] -- two attn_mma changes
# prepared in the forty-fourth session against the two stalls ncu found in
# FP16PV D = 128 (forty-third session, mma_vs_sa2_device.sh), A/B against
# the templates they patch at D = 128 (FP16PV fp32, FP8PV fp32, fp32+fp16,
# pvi8+splitv; 1K / 4K / 16K, causal both ways), plus the SASS of each
# variant's FP16PV D = 128 kernels for reading on the CPU machine (one
# device call; with ROUNDS 3 it needs more than 330 s on an H100).
# Run in the forty-fifth session (bench/NOTES.md m13): kss32 missed
# FP16PV and moved FP8PV shape by shape, and now ships per shape in
# kernel_templates (KS_SMEM, mma_ks_smem), so mma_kscale_smem.patch no
# longer applies to the tree (it patches the tree of 29cb3af,
# before m13; kept for the record); vw2 was noise and still applies.
#
# kss32  (bench/exp/mma_kscale_smem.patch, KSS_ALL 0): each tile's four K
#        scales (16 bytes) ride with its K tile: one thread's cp.async
#        puts them in the padding of the tile's row 0 (never read by
#        ldmatrix), so the step reads k_scale with an LDS after the tile's
#        barrier instead of an LDG from L2 right before its first use.
#        ncu (forty-third session, FP16PV D = 128, 4K) put 2.4 % of all
#        stall samples on the branch between the masked and the unmasked
#        step, waiting on that LDG; the early load (mma_kscale_early.patch)
#        moved the wait and lost elsewhere, m11's load a tile ahead held a
#        register across the loop and lost 3-4 %.  Here the loader keeps a
#        32-bit offset.  Applied where LEAN does not already load k_scale a
#        tile ahead (D = 96 / 128, every FP8PV kernel).
#        ptxas -v sm_90a: FP16PV D = 128 non-causal 255 registers, no
#        spills either way; causal 40 / 52 -> 68 / 64 bytes; FP8PV
#        fp32+fp16 20 / 36 -> 28 / 52; pvi8+splitv 208 / 240 -> 100 / 168;
#        FP16PV D = 96 64 / 88 -> 56 / 68.  Prediction: +1-3 % at D = 128.
#        KSS_ALL 1 also replaces LEAN's k_scale a tile ahead (FP16PV D =
#        32, 64, 256; LEAN's unbounded full V tiles stay): built, not timed.
# vw2    (bench/exp/mma_vwalk2.patch): the V loader's walk (one 64-bit add
#        per 16-byte copy, each add writing the pointer the previous
#        LDGSTS reads) split into two walks, even and odd passes (without
#        split V).  ncu (forty-third session) put ~3 % of the samples
#        on the copies' address arithmetic waiting for registers the
#        previous LDGSTS still read.  ptxas -v sm_90a: the same registers
#        and spills as base in every kernel above (different cubins).
#        Prediction: +1-2 % where V is walked (FP16PV D = 128: eight
#        copies per thread and tile).
#
# On the CPU machine first (NVRTC; saves the device the compiles):
#   cmake --build build -j2 && ../shared/tools/gpu-pack build
#   for v in base kss32 vw2; do rm -rf ab/$v; cp -r kernel_templates ab/$v; done
#   patch -d ab/kss32 -p1 < bench/exp/mma_kscale_smem.patch
#   patch -d ab/vw2 -p1 < bench/exp/mma_vwalk2.patch
#   for v in base kss32 vw2; do SAGEJIT_TEMPLATE_DIR=$PWD/ab/$v build/sagejit warm \
#     --arch sm_90a --family fp16pv,fp8pv --accum fp32,fp32+fp16,pvi8+splitv \
#     --head-dim 128 --dtype fp16 --quant per_thread \
#     --cache-dir build/test-cache/ab-$v; done
# then, carrying build and ab: bench/exp/mma_kss_device.sh build
# The table (each cell's runs, change against base) is $OUT/ab_table.txt;
# the SASS of each variant's FP16PV D = 128 kernels (non-causal and
# causal, with an instruction count) is $OUT/sass.tgz.
set -u
b=${1:?usage: bench/exp/mma_kss_device.sh BUILD [ROUNDS]}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export OUT
mkdir -p /tmp/sass
for v in base kss32 vw2; do
  for c in false true; do
    python3 bench/dump_sass.py "$b/test-cache/ab-$v/kernels.db" \
      "attn_mma<sj::FP16PV,sj::FP16,128,$c,sj::ACC_FP32,32" "/tmp/sass/fp16pv_d128_${c}_$v" \
      > "/tmp/sass/fp16pv_d128_${c}_$v.ops" 2>&1
  done
done
tar -C /tmp -czf "$OUT/sass.tgz" sass
CHECK="--family fp16pv,fp8pv --accum fp32,fp32+fp16,pvi8+splitv --head-dim 128 --dtype fp16 --quant per_thread" \
BENCH="--family fp16pv,fp8pv --accum fp32,fp32+fp16,pvi8+splitv --head-dim 128 --seq 1024,4096,16384 --causal 0,1 --iters 12 --warmup 3" \
ROUNDS=${2:-2} "$(dirname "$0")/../ab_templates.sh" "$b" ab/base ab/kss32 ab/vw2 > "$OUT/ab_table.txt" 2>&1
echo "ab_templates rc=$?"
tail -80 "$OUT/ab_table.txt"
