#!/bin/bash
# bench/exp/split_device.sh BUILD -- fifty-first session: batch pieces
# (bench/exp/batch_split.patch, not merged: apply it and rebuild first;
# runtime/attention.c split_pieces, SAGEJIT_TUNE "split=N": the quantizer
# and the attention kernel per range of batches, a later piece's
# quantizer running under the previous attention kernel's drain) and the
# D = 128 causal two-stage TMA default (spec.c mma_st2_128, the st128 row).
# 1. the GPU suite (test_gpu has test_batch_split: bit-identical O and LSE
#    for 1, 2, 3, 4 and 8 pieces), varlen, faults;
# 2. compute-sanitizer memcheck over `check --quick` with two pieces and
#    the new stage default (wgmma and FP16PV D = 128 causal);
# 3. A/B, attention and end to end, D = 128, the three families' defaults:
#    the templates before this change (ab/head_templates, a copy of
#    1101324's: the attention kernels without the trigger that lets a
#    later piece's quantizer start), these templates, and these with
#    split=2.  All three run this library, so all take its plans (the new
#    stage rule included): the first pair isolates the trigger's cost,
#    the second the split's gain.  Carry ab/head_templates (git-ignored).
# Caches warmed on the CPU machine: test_gpu, ab-head_templates,
# ab-kernel_templates, ab-kernel_templates_split-2.
set -u
b=${1:?usage: bench/exp/split_device.sh BUILD}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
OUT=$OUT bash bench/gpu_session.sh "$b" test varlen faults
. "$(dirname "$0")/san_check.sh"
(
  export SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu SAGEJIT_TUNE=split=2
  san_check "$b" "$OUT" mem-split-wgmma memcheck --head-dim 128 --family wgmma
  san_check "$b" "$OUT" mem-split-mma memcheck --head-dim 128 --family fp16pv,fp8pv
)
CHECK="--quick --family wgmma,fp16pv --head-dim 128" \
BENCH="--family wgmma,fp16pv,fp8pv --head-dim 128 --seq 1024,4096,16384 --causal 0,1 --iters 10 --warmup 3" \
ROUNDS=${ROUNDS:-2} bench/ab_templates.sh "$b" ab/head_templates kernel_templates kernel_templates@split=2 2>&1 | tee "$OUT/ab-split.txt"
