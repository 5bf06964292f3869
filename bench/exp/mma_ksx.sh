#!/bin/bash
# bench/exp/mma_ksx.sh prepare|device BUILD [ROUNDS] -- m13's K scales
# through shared memory (KS_SMEM) on the attn_mma shapes m13 did not
# measure, A/B against the tree, one device call (forty-fifth session,
# not yet run).
#
# m13 shipped KS_SMEM per shape (mma_ks_smem) for FP8PV fp32, fp32+fp16
# and fp32+fp32, where its sign changed with D and causal (−5 to +21 %),
# so the unmeasured shapes are worth one look each:
#   A  FP16PV fp32 at D = 32, 64, 96, 256 (LEAN loads k_scale a tile ahead
#      at 32 / 64 / 256: KS_SMEM replaces that load)
#   B  FP16PV fp16+fp32 and fp32+fp32 at D = 64 and 128
#   C  FP8PV pvi8 at D = 64 and 128
# at 4K / 16K, causal both ways.  The variant `ksx` turns KS_SMEM on
# wherever the kernel has no split V (attn_mma's `KS_SMEM = !SPLIT`);
# the cells already measured in m13 are not timed again.
#
#   prepare  (CPU machine, NVRTC only): the template trees ab/base and
#            ab/ksx, their caches BUILD/test-cache/ab-{base,ksx}, and
#            gpu-pack.  ~1 min on two cores.
#   device   (carry BUILD and ab): `sagejit check` of ksx in the three
#            groups' modes, then bench/ab_templates.sh once per group;
#            tables in $OUT/{A,B,C}/out.txt.  ~4-5 min on an H100
#            with ROUNDS 2.
# Then, where ksx wins, widen mma_ks_smem (a FAM argument for FP16PV) and
# run the GPU suite on that tree before landing it.
set -u -o pipefail
what=${1:?usage: bench/exp/mma_ksx.sh prepare|device BUILD [ROUNDS]}
b=${2:?usage: bench/exp/mma_ksx.sh prepare|device BUILD [ROUNDS]}
here=$(cd "$(dirname "$0")" && pwd)
case $what in
  prepare)
    rm -rf ab/base ab/ksx
    mkdir -p ab
    cp -r kernel_templates ab/base
    cp -r kernel_templates ab/ksx
    python3 - ab/ksx/sj_attn_mma.cuh <<'PY' || exit 1
import sys
p = sys.argv[1]
s = open(p).read()
for old, new in (
    ("constexpr bool KS_SMEM = F8 && mma_ks_smem(ACC, D, CAUSAL);",
     "constexpr bool KS_SMEM = !SPLIT;"),
    ("if (LEAN && n_tiles > 0)\n    k_scale_next = k_scale_at(0);",
     "if (LEAN && !KS_SMEM && n_tiles > 0)\n    k_scale_next = k_scale_at(0);"),
):
    if s.count(old) != 1:
        sys.exit("mma_ksx: the template no longer has: " + old.splitlines()[0])
    s = s.replace(old, new)
open(p, "w").write(s)
PY
    for v in base ksx; do
      rm -rf "$b/test-cache/ab-$v"
      for fam in "fp16pv --accum fp32 --head-dim 32,64,96,256" \
        "fp16pv --accum fp16+fp32,fp32+fp32 --head-dim 64,128" \
        "fp8pv --accum pvi8 --head-dim 64,128"; do
        # shellcheck disable=SC2086
        SAGEJIT_TEMPLATE_DIR=$PWD/ab/$v "$b/sagejit" warm --arch sm_90a --family $fam \
          --dtype fp16 --quant per_thread --causal 0,1 --no-progress \
          --cache-dir "$b/test-cache/ab-$v" | head -1 || exit 1
      done
    done
    ../shared/tools/gpu-pack "$b" | tail -2 ;;
  device)
    OUT=${OUT:-/tmp/out}
    base_out=$OUT
    run_group() { # NAME CHECK BENCH
      mkdir -p "$base_out/$1"
      OUT=$base_out/$1 CHECK=$2 BENCH="$3 --seq 4096,16384 --causal 0,1 --iters 12 --warmup 3" \
        timeout 170 bash "$here/../ab_templates.sh" "$b" ab/base ab/ksx \
        > "$base_out/$1/out.txt" 2>&1
      echo "group $1 rc=$?"
      grep -E "check|attn" "$base_out/$1/out.txt"
    }
    export ROUNDS=${3:-2}
    run_group A "--family fp16pv --accum fp32 --head-dim 32,64,96,256 --dtype fp16 --quant per_thread" \
      "--family fp16pv --accum fp32 --head-dim 32,64,96,256"
    run_group B "--family fp16pv --accum fp16+fp32,fp32+fp32 --head-dim 64,128 --dtype fp16 --quant per_thread" \
      "--family fp16pv --accum fp16+fp32,fp32+fp32 --head-dim 64,128"
    run_group C "--family fp8pv --accum pvi8 --head-dim 64,128 --dtype fp16 --quant per_thread" \
      "--family fp8pv --accum pvi8 --head-dim 64,128" ;;
  *)
    echo "usage: bench/exp/mma_ksx.sh prepare|device BUILD [ROUNDS]" >&2
    exit 2 ;;
esac
