#!/bin/bash
# Probe (fortieth session): how much of the 1K preprocessing is the K
# mean's dependency on kv_stats?  A = default; B = smooth_k off
# (SAGEJIT_TUNE=smk=0: kv_stats reads V only, K blocks still wait for it);
# C = B with quant_qkv's K blocks not waiting for kv_stats at all
# (kw=0: the bound of a K smoothing vector that quant_qkv finds itself).
# Same call, two rounds.  Needs bench/exp/kmean_dep.patch applied.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
b=build-gpu
export LD_LIBRARY_PATH=$PWD/$b/gpu-libs:/usr/local/cuda/lib64
cli=$PWD/$b/sagejit
export SAGEJIT_CACHE_DIR=$OUT/cache
timeout 200 $cli warm --arch sm_90a --head-dim 128,64 --causal 0 --dtype fp16 \
  --family wgmma,fp8pv,fp16pv -j 16 --no-progress > "$OUT/warm.log" 2>&1
echo "warm rc=$?: $(tail -2 "$OUT/warm.log" | head -1)"
for t in "smk=0,kw=0"; do
  SAGEJIT_TUNE=$t timeout 120 $cli check --quick --family wgmma,fp8pv --head-dim 64,128 > "$OUT/check-$t.log" 2>&1
  echo "check $t rc=$?: $(grep -E "^check:" "$OUT/check-$t.log")"
done
for r in 1 2; do
  for v in A B C; do
    case $v in A) t="";; B) t="smk=0";; C) t="smk=0,kw=0";; esac
    SAGEJIT_TUNE=$t timeout 150 $cli bench --family wgmma,fp8pv,fp16pv --head-dim 128,64 \
      --causal 0 --seq 1024,4096,16384 > "$OUT/bench-$v-$r.log" 2>&1
    echo "bench $v round $r rc=$?"
  done
done
for v in A B C; do
  echo "--- $v"
  paste <(grep -E "^ +[0-9]" "$OUT/bench-$v-1.log" | cut -c1-110) \
        <(grep -E "^ +[0-9]" "$OUT/bench-$v-2.log" | awk '{print $(NF-3), $(NF-2), $(NF-1)}')
done
