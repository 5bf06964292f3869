#!/bin/bash
# The thirty-first session's MUFU runs (bench/NOTES.md w27): what share of
# the wgmma kernels' exps pays on the FMA pipes (poly_exp2), and the
# ceiling (half the MUFU ops replaced by FMULs: wrong output, the same
# instruction count).  Before the device call, on the CPU machine, make
# the variants from kernel_templates/ (each a copy with one line of
# attn_wgmma_body's POLY rule, or of exp_pack, changed):
#   bash bench/exp/exp_share_device.sh --make
#   cmake --build build-gpu && ../shared/tools/gpu-pack build-gpu
# then run it through the device tool (carry build-gpu and ab):
#   bash bench/exp/exp_share_device.sh
set -u
vars="pe0 pe8 pe4 pe2 free2"
if [ "${1:-}" = --make ]; then
  for v in $vars; do
    rm -rf ab/$v && mkdir -p ab && cp -r kernel_templates ab/$v
    f=ab/$v/sj_attn_wgmma.cuh
    case $v in
      pe0) rule=0 ;;  # every exp on the MUFU (the kernels before w27)
      pe*) rule=${v#pe} ;; # one n8 group in N, every kernel
      free2) rule=0
        sed -i 's/? poly_exp2(x) : fast_exp2(x);/? poly_exp2(x) : (n % 2 ? x * 1e-30f : fast_exp2(x));/' $f ;;
    esac
    sed -i "s/constexpr int POLY = .*;/constexpr int POLY = $rule;/" $f
    grep -q "constexpr int POLY = $rule;" $f || { echo "exp_share: $v not made" >&2; exit 1; }
  done
  exit 0
fi
B=build-gpu
export LD_LIBRARY_PATH=$PWD/$B/gpu-libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
for v in $vars; do
  SAGEJIT_TEMPLATE_DIR=$PWD/ab/$v $B/sagejit warm -q --arch sm_90a --family wgmma --head-dim 64,128 \
    --dtype fp16 --cache-dir $B/test-cache/ab-$v -j16 > /dev/null 2>&1 &
done
wait
echo "warm $(( $(date +%s) - t0 )) s"
# pe0 is the baseline; `check` runs on the others (free2 must fail it)
ROUNDS=${ROUNDS:-2} bash bench/ab_templates.sh $B $(printf 'ab/%s ' $vars)
