#!/bin/sh
# run.sh BUILD_DIR SOURCE_DIR: install the build into a temporary prefix,
# then build and run tests/consumer with find_package(sagejit) and with
# pkg-config.
set -eu
build=$1; src=$2
tmp=$(mktemp -d /tmp/sjconsumer.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
cmake -S "$src/tests/consumer" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_BUILD_TYPE=Release > "$tmp/configure.log"
cmake --build "$tmp/build" > "$tmp/build.log"
LD_LIBRARY_PATH="$tmp/prefix/lib:$tmp/prefix/lib64:${LD_LIBRARY_PATH:-}" "$tmp/build/consumer"
"$tmp/build/consumer_static"
# pkg-config
pc=$(find "$tmp/prefix" -name sagejit.pc | head -n 1)
sed -i "s|^prefix=.*|prefix=$tmp/prefix|" "$pc"
PKG_CONFIG_PATH=$(dirname "$pc") cc -o "$tmp/consumer_pc" "$src/tests/consumer/main.c" \
  $(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs sagejit)
LD_LIBRARY_PATH="$tmp/prefix/lib:$tmp/prefix/lib64:${LD_LIBRARY_PATH:-}" "$tmp/consumer_pc"
echo "consumer: find_package, static and pkg-config builds all run"
