# bench/gpu_libs.sh -- sourced by the device scripts: gpu_libs BUILD puts
# BUILD/gpu-libs (what ../shared/tools/gpu-pack copied) first on the
# library path, after checking that its libsagejit is BUILD's own.  A copy
# older than BUILD's library runs the templates embedded before the last
# rebuild (the thirty-first session timed one such call by mistake).
gpu_libs() {
  if [ -e "$1/gpu-libs/libsagejit.so.0" ] && ! cmp -s "$1/gpu-libs/libsagejit.so.0" "$1/libsagejit.so.0"; then
    echo "$(basename "$0"): $1/gpu-libs/libsagejit.so.0 is not $1's library: run ../shared/tools/gpu-pack $1" >&2
    exit 2
  fi
  export LD_LIBRARY_PATH=$PWD/$1/gpu-libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
}
