#!/bin/bash
# bench/sanitize_gpu.sh BUILD OUTDIR -- compute-sanitizer memcheck and
# racecheck over every kernel family (issue 6).  About 3 minutes on an H100
# (set SAN_EXTRA=1 to add synccheck and initcheck runs, a minute more).
#
# What runs, each under the tool, each logged to OUTDIR/<name>.{log,san}:
#  memcheck   sagejit check --quick, head dim 64 (fp16) and 128 (bf16), for
#             fp16pv (accumulation fp32, fp16+fp32) and fp8pv (fp32,
#             fp32+fp32, fp32+fp16); --quick crosses causal off/on (both
#             diagonal alignments) with the shapes 17x17 (GQA), 127x127
#             (padded strides) and 17x1000 (GQA): tails of both tiles.
#  memcheck   tests/test_gpu_faults nonfinite: NaN/Inf inputs, every family
#             and accumulation, head dims 64/128, causal both ways, 200x333
#             (tails), guard zones around the output.
#  memcheck   tests/test_gpu_faults padding: padded views with NaN padding,
#             130x333.
#  racecheck  sagejit check --quick, head dim 64 (fp16) and 128 (bf16), both
#             families with their default accumulation.
#  On sm_90 also the wgmma family: memcheck at head dims 64, 128, 256 with
#             every granularity, racecheck over all three head dims (its
#             default, pvi8+splitv); its pvi8 and split V modes alone
#             (memcheck at 64, 128, 256, racecheck at 64, 128).
# Kernels are JIT-compiled by NVRTC into OUTDIR/cache on first use (host
# work, not slowed by the sanitizer).  The verdict is the last line:
# PASS when every run exits 0 and reports no error.  Exit 0 on PASS, 1 on
# FAIL, 2 if it cannot run.
set -u
usage="usage: bench/sanitize_gpu.sh BUILD OUTDIR"
build=$(cd "${1:?$usage}" && pwd) || exit 2
out=${2:?$usage}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export LD_LIBRARY_PATH=$build/gpu-libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export SAGEJIT_CACHE_DIR=$out/cache
export SAGEJIT_CACHE_PATH=
unset SAGEJIT_ARCH SAGEJIT_FAMILY SAGEJIT_CACHE_DISABLE
cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
cli=$build/sagejit
faults=$build/tests/test_gpu_faults
for f in "$cs" "$cli" "$faults"; do
  [ -x "$f" ] || { echo "sanitize_gpu: CANNOT RUN: $f is missing"; exit 2; }
done
"$cs" --version 2>&1 | head -n 2 | tee "$out/version.txt"
nvidia-smi -L 2>&1 | head -n 1 | tee -a "$out/version.txt"

SAN_ERR=86 # compute-sanitizer's exit status when it found errors
runs=0
bad=0
: > "$out/summary.txt"

# san NAME TOOL [TOOL OPTIONS --] COMMAND...
san() {
  local name=$1 tool=$2
  shift 2
  local opts=()
  if [ "$tool" = racecheck ]; then
    opts=(--racecheck-report all)
  fi
  local t0 rc verdict summary
  t0=$(date +%s)
  timeout "${SAN_TIMEOUT:-900}" "$cs" --tool "$tool" --error-exitcode "$SAN_ERR" \
    --print-limit 50 --log-file "$out/$name.san" ${opts[@]+"${opts[@]}"} "$@" \
    > "$out/$name.log" 2>&1
  rc=$?
  case $rc in
    0) verdict=clean ;;
    "$SAN_ERR") verdict="SANITIZER ERRORS" ;;
    124) verdict="TIMEOUT" ;;
    *) verdict="FAILED (exit $rc)" ;;
  esac
  runs=$((runs + 1))
  [ "$rc" = 0 ] || bad=$((bad + 1))
  # the tool's own summary line(s)
  summary=$(grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY|INITCHECK SUMMARY|LEAK SUMMARY" \
    "$out/$name.san" 2> /dev/null | tr '\n' ' ' | sed 's/========= //g')
  printf '%-26s %-10s %4ds  %-18s %s\n' "$name" "$tool" "$(( $(date +%s) - t0 ))" \
    "$verdict" "$summary" | tee -a "$out/summary.txt"
}

q="check --quick --json"
# memcheck: every family and accumulation, both head dims
san mem-check-fp16pv-d64  memcheck "$cli" $q --family fp16pv --accum fp32,fp16+fp32 --head-dim 64 --dtype fp16
san mem-check-fp16pv-d128 memcheck "$cli" $q --family fp16pv --accum fp32,fp16+fp32 --head-dim 128 --dtype bf16
san mem-check-fp8pv-d64   memcheck "$cli" $q --family fp8pv --accum fp32,fp32+fp32,fp32+fp16 --head-dim 64 --dtype fp16
san mem-check-fp8pv-d128  memcheck "$cli" $q --family fp8pv --accum fp32,fp32+fp32,fp32+fp16 --head-dim 128 --dtype bf16
if [ "$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1)" = 9.0 ]; then
  # the wgmma family (sm_90a): TMA, mbarriers and wgmma, every head dim
  san mem-check-wgmma-d64   memcheck "$cli" $q --family wgmma --quant per_block,per_thread --head-dim 64 --dtype fp16
  san mem-check-wgmma-d128  memcheck "$cli" $q --family wgmma --quant per_warp,per_thread --head-dim 128 --dtype bf16
  san mem-check-wgmma-d256  memcheck "$cli" $q --family wgmma --head-dim 256 --dtype fp16
  san race-check-wgmma      racecheck "$cli" $q --family wgmma --head-dim 64,128,256 --dtype fp16
  # INT8 P.V (pvi8): its own V layout (u8) and accumulators
  san mem-check-wgmma-pvi8  memcheck "$cli" $q --family wgmma --accum pvi8 --quant per_block,per_thread --head-dim 64,128,256 --dtype fp16
  san race-check-wgmma-pvi8 racecheck "$cli" $q --family wgmma --accum pvi8 --head-dim 64,128 --dtype bf16
  # split V alone (the default, pvi8+splitv, takes pvi8 on check's Gaussian
  # V; its split V body runs on the NaN inputs of the faults runs below)
  san mem-check-wgmma-split memcheck "$cli" $q --family wgmma --accum fp32+fp32+splitv --quant per_warp,per_thread --head-dim 64,128,256 --dtype fp16
  san race-check-wgmma-split racecheck "$cli" $q --family wgmma --accum fp32+fp32+splitv --head-dim 64,128 --dtype fp16
fi
san mem-faults-nonfinite  memcheck "$faults" nonfinite
san mem-faults-padding    memcheck "$faults" padding
# racecheck: shared memory hazards of both families' kernels
san race-check-d64        racecheck "$cli" $q --family fp16pv,fp8pv --head-dim 64 --dtype fp16
san race-check-d128       racecheck "$cli" $q --family fp16pv,fp8pv --head-dim 128 --dtype bf16
if [ "${SAN_EXTRA:-0}" = 1 ]; then
  san sync-check-d128     synccheck "$cli" $q --family fp16pv,fp8pv --head-dim 128
  san init-check-d64      initcheck "$cli" $q --family fp16pv,fp8pv --head-dim 64
fi

# the checks themselves must pass, too (a JSON "failed" count per run)
for f in "$out"/*-check-*.log; do
  n=$(python3 -c 'import json,sys
t=open(sys.argv[1]).read()
print(json.loads(t[t.index("{"):])["failed"])' "$f" 2> /dev/null || echo "?")
  if [ "$n" != 0 ]; then
    echo "$(basename "$f" .log): $n accuracy cases failed (or no JSON)" | tee -a "$out/summary.txt"
  fi
done

if [ "$bad" = 0 ]; then
  echo "sanitize_gpu: PASS: $runs runs (memcheck, racecheck) clean; logs in $out" |
    tee -a "$out/summary.txt"
  exit 0
fi
echo "sanitize_gpu: FAIL: $bad of $runs runs not clean (see $out/summary.txt and the .san logs)" |
  tee -a "$out/summary.txt"
exit 1
