#!/bin/bash
# bench/exp/iacc_device.sh BUILD [VARIANT] -- forty-ninth session, one device
# call: (1) bench/exp/mma_probe.cu (build-probe/mma_probe); (2) the SASS
# opcode mix of the solo D = 128 kernel, HEAD's templates against the
# variant (build-probe/*.cubin, compiled on the CPU machine); (3) `sagejit
# check` on both; (4) bench/ab_templates.sh HEAD against the variant
# (default: ab_iacc, INT8 O accumulated in the tensor core across tiles:
#   cp -r kernel_templates ab_iacc && patch -d ab_iacc -p2 < bench/exp/wgmma_iacc.patch
# then warm build/test-cache/ab-kernel_templates and ab-ab_iacc on the CPU
# machine, wgmma D 64 and 128, causal 0,1, fp16 and bf16: see
# bench/ab_templates.sh).  The cubins for (2): nvcc -cubin of an explicit
# instantiation of attn_wgmma per template directory, in an empty
# directory (a stale sj_kernels.cu beside it shadows -I).
set -u
export PATH=$PATH:/usr/local/cuda/bin
b=${1:?usage: bench/exp/iacc_device.sh BUILD [VARIANT]}
v=${2:-ab_iacc}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
if [ -x build-probe/mma_probe ]; then
  build-probe/mma_probe 4096 2>&1 | tee "$OUT/mma_probe.txt"
fi
for c in build-probe/*.cubin; do
  [ -f "$c" ] || continue
  echo "== $c"
  cuobjdump -sass "$c" | awk '/Function :/ {f=$3} /^ +\/\*[0-9a-f]+\*\/ / {op=$2; if (op ~ /^@/) op=$3; sub(/\..*/, "", op); n[f" "op]++} END {for (k in n) print n[k], k}' |
    sort -k2,2 -k1,1nr | awk '{c[$2]++; if (c[$2] <= 22) printf "%s %s %s\n", $2, $3, $1}' > "$OUT/sass-$(basename "$c" .cubin).txt"
done
for t in kernel_templates "$v"; do
  SAGEJIT_TEMPLATE_DIR=$PWD/$t SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/ab-$t timeout 200 \
    "$b/sagejit" check --family wgmma --head-dim 64,128 --dtype fp16,bf16 > "$OUT/check-full-$t.log" 2>&1
  echo "check $t: rc=$? $(tail -1 "$OUT/check-full-$t.log")"
done
CHECK="--quick --family wgmma --head-dim 128" ROUNDS=${ROUNDS:-3} OUT=$OUT \
  bench/ab_templates.sh "$b" kernel_templates "$v" 2>&1 | tee "$OUT/ab.txt"
