#!/bin/bash
# bench/exp/er128_default_device.sh BUILD -- fifty-first session, last
# device call: FP16PV fp32 at D = 128 with its O rescale before the exps
# without the mask too (EARLY_RESCALE where the tiles come by TMA; the
# er128 row) and the causal two-stage rule (st128) under the GPU suite,
# compute-sanitizer memcheck and racecheck over `check --quick` at D = 128
# (FP16PV fp32, both ways), then the D = 128 table of the three families
# beside SDPA-cuDNN in the same call.
set -u
b=${1:?usage: bench/exp/er128_default_device.sh BUILD}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. "$(dirname "$0")/../gpu_libs.sh"
gpu_libs "$b"
OUT=$OUT bash bench/gpu_session.sh "$b" info test varlen faults
. "$(dirname "$0")/san_check.sh"
export SAGEJIT_CACHE_DIR=$PWD/$b/test-cache/test_gpu
san_check "$b" "$OUT" mem-fp16pv memcheck --head-dim 128 --family fp16pv --accum fp32
san_check "$b" "$OUT" race-fp16pv racecheck --head-dim 128 --family fp16pv --accum fp32
. "$(dirname "$0")/d128_table.sh"
d128_table "$b" "$OUT"
