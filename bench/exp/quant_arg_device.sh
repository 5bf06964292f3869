#!/bin/bash
# A/B on the device of the quantizer's granularity: old = a template
# parameter (build-old, a build of dd1033f), v1 = the kernel argument with
# every group count a run-time value (add6254's templates, through
# SAGEJIT_TEMPLATE_DIR=$V1_TEMPLATES, e.g. `git worktree add /tmp/v1
# add6254` and V1_TEMPLATES=/tmp/v1/kernel_templates, carried), v2 = the
# group-scale section specialized per granularity (build-gpu as built
# from 121e736 or later, which merged what was quant_groups_v2.patch).
# Same call, two rounds, preprocessing and end-to-end time.  Both builds
# gpu-packed and carried.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
seqs=${SEQS:-1024,16384}
args="--family wgmma,fp8pv,fp16pv --head-dim 128,64 --causal 0 --quant per_block,per_thread --seq $seqs"
run() { # variant command...
  local v=$1
  shift
  local b=build-gpu
  [ "$v" = old ] && b=build-old
  if [ "$v" = v1 ]; then
    SAGEJIT_TEMPLATE_DIR=${V1_TEMPLATES:?add6254 kernel_templates} LD_LIBRARY_PATH=$PWD/$b/gpu-libs:/usr/local/cuda/lib64 \
      $b/sagejit "$@" --cache-dir "$OUT/cache-$v"
  else
    LD_LIBRARY_PATH=$PWD/$b/gpu-libs:/usr/local/cuda/lib64 $b/sagejit "$@" --cache-dir "$OUT/cache-$v"
  fi
}
for v in old v1 v2; do
  run $v warm --arch sm_90a --head-dim 128,64 --causal 0 --dtype fp16 \
    --family wgmma,fp8pv,fp16pv --quant per_block,per_thread -j 16 > "$OUT/warm-$v.log" 2>&1
  echo "warm $v rc=$?: $(head -1 "$OUT/warm-$v.log")"
done
for r in 1 2; do
  for v in old v1 v2; do
    timeout 150 bash -c "$(declare -f run); OUT=$OUT; run $v bench $args" > "$OUT/bench-$v-$r.log" 2>&1
    echo "bench $v round $r rc=$?"
  done
done
