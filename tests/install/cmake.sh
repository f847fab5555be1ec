#!/bin/sh
# A CMake project builds against an installed weft and runs 2 ranks:
#   find_package(weft 0.1 CONFIG REQUIRED) -> weft::weft   (examples/cmake)
# `meson install --destdir` stages the prefix in a scratch directory; the CMake package's paths are relative
# to its own location, so the staged tree is found as the prefix itself would be.
set -eu
build="$1"; src="$2"
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
meson install -C "$build" --no-rebuild --destdir "$dest" --quiet >/dev/null
config=$(find "$dest" -name weftConfig.cmake | head -1)
[ -n "$config" ] || { echo "cmake.sh: weftConfig.cmake was not installed"; exit 1; }
[ -n "$(find "$dest" -name weftConfigVersion.cmake)" ] || { echo "cmake.sh: weftConfigVersion.cmake was not installed"; exit 1; }
prefix=$dest$(meson introspect "$build" --buildoptions |
  /usr/bin/python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"][0])')
cmake -S "$src/examples/cmake" -B "$dest/example" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  >"$dest/configure.log" 2>&1 || { cat "$dest/configure.log"; echo "cmake.sh: configuring examples/cmake failed"; exit 1; }
cmake --build "$dest/example" >"$dest/build.log" 2>&1 || { cat "$dest/build.log"; echo "cmake.sh: building it failed"; exit 1; }
# The package that was found is the staged one, not another weft on the machine.
grep -q "weft_DIR:PATH=$(dirname "$config")" "$dest/example/CMakeCache.txt" ||
  { grep weft_DIR "$dest/example/CMakeCache.txt"; echo "cmake.sh: CMake found another weft"; exit 1; }
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for r in 0 1; do
  WEFT_RANK=$r WEFT_WORLD_SIZE=2 WEFT_ROOT=127.0.0.1:$port WEFT_SOCKET_IFNAME=lo WEFT_BOOTSTRAP_TIMEOUT_MS=60000 \
    timeout 120 "$dest/example/weft_all_reduce" >"$dest/rank$r.log" 2>&1 &
  eval "pid$r=\$!"
done
status=0
for r in 0 1; do
  eval "wait \$pid$r" || status=1
  cat "$dest/rank$r.log"
  grep -q "^rank $r of 2: all_reduce of 1000 int64 correct (v\[999\] = 2997)" "$dest/rank$r.log" || status=1
done
[ "$status" -eq 0 ] || { echo "cmake.sh: the 2 ranks of examples/cmake did not both all_reduce correctly"; exit 1; }
echo "cmake.sh: examples/cmake found weft through $config, built and ran 2 ranks"
