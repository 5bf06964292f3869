#!/usr/bin/env bash
# Build the SageAttention2 in-run baseline benches.
#
#   bench/sa2/build.sh SA2_CSRC_DIR OUTDIR [sm90|mma|all]
#
# SA2_CSRC_DIR is a SageAttention csrc/ tree (the directory that holds
# wgmma.cuh, mma.cuh, ... and qattn/); SA2 code is never copied into this
# repository, it is only included from there. OUTDIR is created if missing
# (use something under build-sa2/, which /build*/ keeps out of git).
# Produces OUTDIR/sa2_sm90_bench and OUTDIR/sa2_mma_bench, plus the ptxas
# resource report of each in OUTDIR/<name>.ptxas.log.
#
# Flags mirror SageAttention's setup.py (-O3 --use_fast_math, half operators
# enabled, -gencode arch=compute_90a,code=sm_90a) with a single target, sm_90a:
# SA2 also builds its sm80 / sm89 (mma.sync) kernels for sm_90a when the
# machine is an H100. (Plain -arch=sm_90a is not used: nvcc 13 then also embeds
# compute_90 PTX, which cannot hold the wgmma instructions.)
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 SA2_CSRC_DIR OUTDIR [sm90|mma|all]" >&2
  exit 1
fi

SA2_DIR=$(cd "$1" && pwd)
OUT=$2
WHAT=${3:-all}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA_HOME/bin/nvcc}

for f in wgmma.cuh mma.cuh qattn/attn_utils.cuh; do
  [[ -f "$SA2_DIR/$f" ]] || { echo "error: $SA2_DIR/$f not found (SA2_CSRC_DIR must be SageAttention's csrc/)" >&2; exit 1; }
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

FLAGS=(-O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a
       -U__CUDA_NO_HALF_OPERATORS__ -U__CUDA_NO_HALF_CONVERSIONS__
       --use_fast_math -Xptxas=-v -diag-suppress=174,177,550
       -lineinfo
       -I"$SA2_DIR" -I"$HERE")
# cuTensorMapEncodeTiled (driver API) for the sm90 TMA descriptors; link against
# the toolkit stub so this also builds on a machine without a driver.
LIBS=(-L"$CUDA_HOME/lib64/stubs" -lcuda)

build() {
  local name=$1 src=$2
  echo "[sa2] building $OUT/$name" >&2
  # ptxas -v goes to stderr; keep it next to the binary and show the summary.
  if ! "$NVCC" "${FLAGS[@]}" "$src" -o "$OUT/$name" "${LIBS[@]}" 2> "$OUT/$name.ptxas.log"; then
    cat "$OUT/$name.ptxas.log" >&2
    echo "[sa2] build of $name FAILED" >&2
    exit 1
  fi
  # Entry name, then its resource lines (registers / spills).
  awk '/Compiling entry function/ {fn=$0}
       /bytes stack frame/ {sp=$0}
       /Used [0-9]+ registers/ && fn != "" {print fn; print sp; print $0; fn=""}' \
      "$OUT/$name.ptxas.log" | sed -e 's/^ptxas info *: //' -e "s/ for 'sm_90a'//" >&2 || true
}

case "$WHAT" in
  sm90) build sa2_sm90_bench "$HERE/sa2_sm90_bench.cu" ;;
  mma)  build sa2_mma_bench  "$HERE/sa2_mma_bench.cu" ;;
  all)  build sa2_sm90_bench "$HERE/sa2_sm90_bench.cu"
        build sa2_mma_bench  "$HERE/sa2_mma_bench.cu" ;;
  *) echo "unknown target $WHAT (sm90|mma|all)" >&2; exit 1 ;;
esac
echo "[sa2] done: $OUT" >&2
