#!/bin/sh
# libweft exports weft* and nothing else (no C++ internals, no Abseil), and needs no UCX library.
set -eu
lib="$1"
others=$(nm -D --defined-only "$lib" | awk '$2 ~ /[TDBRVW]/ {print $3}' | sed 's/@.*//' | grep -v '^weft' | grep -v '^WEFT_0$' || true)
if [ -n "$others" ]; then
  echo "exports.sh: $lib exports symbols outside weft*:"; echo "$others" | head -20
  exit 1
fi
count=$(nm -D --defined-only "$lib" | grep -c ' T weft')
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
[ "$soname" = "libweft.so.0" ] || { echo "exports.sh: soname is '$soname', want libweft.so.0"; exit 1; }
# UCX is opened when first used (comm/ucx/ucp_api.h), so libweft loads where UCX is not installed.
if objdump -p "$lib" | awk '/NEEDED/ {print $2}' | grep -E '^lib(ucp|ucs|uct|ucm)\.'; then
  echo "exports.sh: $lib links UCX (above) instead of loading it when first used"; exit 1
fi
echo "exports.sh: $count weft* functions exported, nothing else; soname $soname; no UCX library needed"
