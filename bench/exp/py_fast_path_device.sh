#!/bin/bash
# The Python package's short path for repeated calls (merged in the
# twenty-seventh session): GPU tests, then host and GPU time per call
# against the package before it (0aefb16).  Before the device call, on
# the CPU machine:
#   rm -rf ab/old && mkdir -p ab/old && git archive 0aefb16 python | tar -x -C ab/old
#   cmake --build build-gpu && ../shared/tools/gpu-pack build-gpu
# then run it through the device tool (carry build-gpu):
#   bash bench/exp/py_fast_path_device.sh
B=$PWD/build-gpu
export LD_LIBRARY_PATH=$B/gpu-libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
t0=$(date +%s)
export SAGEJIT_CACHE_DIR=$B/test-cache/py SAGEJIT_LIBRARY=$B/libsagejit.so MPLBACKEND=Agg
timeout 45 $B/sagejit warm --arch sm_90a --family fp16pv,fp8pv,wgmma --head-dim 32,64,96,128,256 --dtype fp16,bf16 -j 16 -q > $OUT/warm.log 2>&1
echo "warm rc=$? $(( $(date +%s) - t0 )) s"
PYTHONPATH=$PWD/python timeout 300 python3 -m pytest -q -p no:cacheprovider tests/python/test_gpu.py tests/python/test_api.py > $OUT/pytest.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/pytest.log
for r in 1 2; do for c in old new; do
  P=$PWD/python; [ $c = old ] && P=$PWD/ab/old/python
  PYTHONPATH=$P timeout 30 python3 bench/bench_attention.py --out $OUT/b_${c}_$r --seqs 1024,2048 --head-dims 64,128 --methods sagejit > $OUT/b_${c}_$r.log 2>&1
  echo "bench $c r$r rc=$? $(( $(date +%s) - t0 )) s"
done; done
for c in old new; do for r in 1 2; do awk -F, -v c=$c -v r=$r 'NR>1{printf "%s r%s D%s c%s N%s ms %.4f tops %.1f host %.1f\n", c, r, $6, $7, $5, $8, $9, $10}' $OUT/b_${c}_$r/results.csv; done; done
echo "end $(( $(date +%s) - t0 )) s"
