#!/bin/bash
# Device check and measurement of pvi8+splitv on FP8PV (forty-second
# session; bench/exp/fp8pv_vauto.patch, also branch exp/fp8pv-vauto,
# written and CPU-tested without a GPU: ctest 18/18, every FP8PV template
# compiled for sm_89 in test_compile_matrix).  On the CPU machine:
#   git apply bench/exp/fp8pv_vauto.patch   (or merge the branch)
#   cmake --build build -j2 && ../shared/tools/gpu-pack build
#   rm -rf ab/ni && cp -r kernel_templates ab/ni &&
#     patch -d ab/ni -p1 < bench/exp/fp8pv_vauto_noinline.patch
# then in one device call (carry build and ab; about seven minutes on an
# H100):
#   bench/exp/fp8pv_vauto_device.sh build
# 1. every sm_90a kernel into the test cache (gpu_session.sh prewarm);
# 2. test_gpu (the matrix now has FP8PV pvi8+splitv; test_v_auto runs both
#    families, FP8PV also at D = 32 and 96: bit for bit the mode each
#    head's V asks for, <= 3.5e-2 on every head, and pvi8 alone above it on
#    the outlier heads of each family) and test_gpu_varlen (the mode
#    appended to its list, on V whose odd (sequence, kv head) pairs carry
#    outlier tokens for two granularities: split V's body on packed
#    batches, split V's gate);
# 3. `sagejit check` over the new mode (D 32-256, fp16 and bf16);
# 4. FP8PV at D = 128, 96, 64, 32, causal both ways, 1K / 4K / 16K:
#    fp32+fp32 (sm_90's FP8PV default, which AUTO takes at D = 32 and 96
#    on an H100), pvi8 alone and pvi8+splitv (Gaussian V: every head takes
#    pvi8), two rounds: is the two-body kernel as fast as pvi8 alone, and
#    should it be sm_90's FP8PV default?
# 5. in the same rounds, pvi8+splitv with each body a `__noinline__` call
#    (bench/exp/fp8pv_vauto_noinline.patch, applied to a copy of the
#    templates in ab/ni; carry ab too): ptxas allocates the two inlined
#    bodies together (sm_90a, D = 128: 208 / 240 bytes of spill stores /
#    loads, against pvi8's 68 / 92 alone), called ones apart (pvi8 body
#    76 / 92, split V body 56 / 68, the kernel a 320-byte frame for the
#    fused Q rows passed by reference).
# Logs go to $OUT (a tarball: the device returns at most eight files).
set -u
b=${1:-build}
final=${OUT:-/tmp/out}
mkdir -p "$final" /tmp/o
export OUT=/tmp/o
bench/gpu_session.sh "$b" info prewarm test varlen
export LD_LIBRARY_PATH=$PWD/$b/gpu-libs:/usr/local/cuda/lib64
export SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu
cli=$PWD/$b/sagejit
timeout 200 $cli check --family fp8pv --accum pvi8+splitv --head-dim 32,64,96,128,256 \
  --dtype fp16,bf16 > /tmp/o/check.log 2>&1
echo "check rc=$?: $(grep -E "^check:" /tmp/o/check.log)"
grep -E "test_v_auto|fp8pv case|pvi8\+splitv:" /tmp/o/test_gpu.log | tail -12
ni=$PWD/ab/ni
if [ -d "$ni" ]; then
  SAGEJIT_TEMPLATE_DIR=$ni SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/ab-ni timeout 150 \
    $cli check --family fp8pv --accum pvi8+splitv --head-dim 32,64,96,128 > /tmp/o/check-ni.log 2>&1
  echo "check noinline rc=$?: $(grep -E "^check:" /tmp/o/check-ni.log)"
fi
for r in 1 2; do
  timeout 200 $cli bench --family fp8pv --accum fp32+fp32,pvi8,pvi8+splitv \
    --head-dim 128,96,64,32 --causal 0,1 --no-progress > /tmp/o/bench-$r.log 2>&1
  echo "bench round $r rc=$?"
  [ -d "$ni" ] && SAGEJIT_TEMPLATE_DIR=$ni SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/ab-ni \
    timeout 120 $cli bench --family fp8pv --accum pvi8+splitv --head-dim 128,96,64,32 \
    --causal 0,1 --no-progress > /tmp/o/bench-ni-$r.log 2>&1
  echo "bench noinline round $r rc=$?"
done
for v in "" ni-; do
  echo "--- ${v:-inline} (round 1, then round 2's attn / e2e / prep)"
  paste <(grep -E "^ +[0-9]" /tmp/o/bench-${v}1.log | cut -c1-120) \
        <(grep -E "^ +[0-9]" /tmp/o/bench-${v}2.log | awk '{print $(NF-3), $(NF-2), $(NF-1)}')
done
tar czf "$final/o.tgz" -C /tmp o
