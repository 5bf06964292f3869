#!/bin/sh
# tools/setup.sh -- the README's first command: install what is missing
# (Debian packages), configure, build, and warm the kernel cache for the
# default set (this machine's GPUs, or the default targets without one).
#   BUILD_DIR   build folder (default: build)
#   CMAKE_ARGS  extra configure arguments
set -eu
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}

need=""
# Build: cmake, gcc, SQLite, xxHash; tests: cmocka, and pytest + a CPU
# torch for the Python package's argument and loader tests.
for pkg in cmake make gcc pkg-config libsqlite3-dev libxxhash-dev libcmocka-dev \
    python3-pytest python3-torch; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" ||
    need="$need $pkg"
done
if [ -n "$need" ]; then
  echo "setup: installing$need" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
    --no-install-recommends $need
fi
if [ ! -f /usr/local/cuda/include/cuda.h ] && [ -z "${CUDA_HOME:-}" ]; then
  echo "setup: the CUDA toolkit headers were not found (set CUDA_HOME)" >&2
  exit 2
fi

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DSAGEJIT_WERROR=ON \
  ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j "$(nproc)"
# The default set into the default cache (~/.cache/sagejit or
# $SAGEJIT_CACHE_DIR).
"$BUILD_DIR/sagejit" warm
