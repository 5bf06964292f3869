#!/bin/bash
# bench/python_gpu_session.sh OUTDIR [STEP...] -- the Python package on a GPU
# machine, every step logged under OUTDIR, each with a timeout; a failing
# step never stops the next one.  Run from anywhere, e.g.:
#
#   export SAGEJIT_LIBRARY=$PWD/build-gpu/libsagejit.so \
#          LD_LIBRARY_PATH=$PWD/build-gpu/gpu-libs:$LD_LIBRARY_PATH
#   bash bench/python_gpu_session.sh $OUT
#
# Steps (default: all, in this order; expected 5-7 minutes on an H100):
#   info     nvidia-smi, versions, sagejit.info()            -> info.log
#   warm     precompile the kernels the tests use (all cores) -> warm.log
#   pytest   the Python test suite, GPU tests included       -> pytest.log
#   compile  bench/compile_demo.py                            -> compile_demo.log
#   bench    bench/bench_attention.py --out OUTDIR/bench      -> bench.log
#   first    bench/first_call.py                              -> first_call.log
#   model    bench/real_model.py                              -> real_model.log
# The timeouts add up to 600 s (nvidia-smi 15, info 25, warm 50, pytest 160,
# compile 110, bench 130, first 50, model 60); to stay well inside one
# 10-minute command, or to give a step more room, run the steps in two calls,
# e.g. "... OUTDIR info warm pytest compile" then "... OUTDIR bench first
# model" (each appends to OUTDIR/SUMMARY.txt).  PYTHON overrides python3;
# SAGEJIT_CACHE_DIR defaults to a folder under /tmp (not OUTDIR, so the
# kernel cache does not come back with the results).
set -u
OUT=${1:?usage: bash bench/python_gpu_session.sh OUTDIR [info warm pytest compile bench first model]}
shift
steps=${*:-info warm pytest compile bench first model}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 2
cd "$(dirname "$0")/.." || exit 2
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONDONTWRITEBYTECODE=1
export SAGEJIT_CACHE_DIR=${SAGEJIT_CACHE_DIR:-/tmp/sagejit-py-session-cache}
export SAGEJIT_CACHE_PATH=
export MPLBACKEND=Agg
summary=$OUT/SUMMARY.txt
touch "$summary"

INFO_PY='
import importlib, json, sys
import torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda",
      torch.version.cuda, "gpu",
      torch.cuda.get_device_name() if torch.cuda.is_available() else None)
for name in ("numpy", "matplotlib", "transformers", "timm", "pytest",
             "sageattention"):
    try:
        mod = importlib.import_module(name)
        print(name, getattr(mod, "__version__", "importable"))
    except Exception as e:
        print(name, "not importable:", type(e).__name__, e)
import sagejit
i = sagejit.info()
print(json.dumps(i, indent=1))
print("info: sagejit", i["library"].get("version"), "at",
      i["library"].get("path"), "custom op", sagejit.uses_custom_op(),
      "devices", [d.get("name") for d in i.get("devices", [])])
'

note() { echo "$*" | tee -a "$summary"; }

# run NAME TIMEOUT LOG CMD...: runs CMD with a timeout into LOG, then prints
# the step's rc, its time and the log's last summary line.
run() {
  local name=$1 limit=$2 log=$3; shift 3
  local t0=$SECONDS
  echo "=== $name $(date +%T) (timeout ${limit}s)"
  timeout -k 10 "$limit" "$@" > "$OUT/$log" 2>&1
  local rc=$?
  local last
  last=$(grep -E "^(bench_attention|first_call|real_model|compile_demo|warm|info):|passed|failed|skipped|error" "$OUT/$log" | tail -1)
  [ $rc -eq 124 ] && last="TIMED OUT after ${limit}s; $last"
  note "$name: rc=$rc $((SECONDS - t0))s -- ${last:-$(tail -1 "$OUT/$log")}"
}

for step in $steps; do
  case $step in
    info)
      run nvidia-smi 15 nvidia-smi.log nvidia-smi
      run info 25 info.log "$PY" -c "$INFO_PY" ;;
    warm)
      run warm 50 warm.log "$PY" -c '
import os, torch, sagejit
fams = ["fp16pv"] + (["fp8pv"] if torch.cuda.get_device_capability() >= (8, 9) else [])
r = sagejit.warm(head_dims=[32, 64, 96, 128, 256], causal=[False, True],
                 dtypes=["fp16", "bf16"], families=fams, jobs=os.cpu_count() or 4)
print("warm:", r)'
      ;;
    pytest)
      # GPU tests first: if the step runs out of time, the CPU-side tests
      # (also run by CI) are the ones cut.  --maxfail instead of -x: one
      # batched session should report every failure, not the first.
      files="tests/python/test_gpu.py tests/python/test_api.py tests/python/test_loader.py tests/python/test_structs.py"
      if "$PY" -c "import pytest" 2>/dev/null; then
        run pytest 160 pytest.log "$PY" -m pytest -q -rfEs --maxfail=20 \
          -p no:cacheprovider $files
      else
        echo "(pytest is not installed: tests/python/minipytest.py runs the suite)"
        run pytest 160 pytest.log "$PY" tests/python/minipytest.py $files
      fi
      ;;
    compile)
      run compile 110 compile_demo.log "$PY" bench/compile_demo.py ;;
    bench)
      run bench 130 bench.log "$PY" bench/bench_attention.py --out "$OUT/bench" \
        --budget-s 100 ;;
    first)
      run first 50 first_call.log "$PY" bench/first_call.py --out "$OUT" \
        --repeats 2 --timeout 25 ;;
    model)
      run model 60 real_model.log "$PY" bench/real_model.py --out "$OUT" ;;
    *)
      note "$step: unknown step" ;;
  esac
done
echo "=== done $(date +%T); summary in $summary"
cat "$summary"
