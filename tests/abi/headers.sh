#!/bin/sh
# Each public header compiles alone (twice included, as C99 with strict
# prototypes and as C++), declares its functions with C linkage (a C++
# program taking the address of each links against libweft), and every
# function libweft exports is declared in exactly one subsystem header.
# $3: the build's include directory, which holds the generated weft/version.h.
set -eu
inc="$1"; lib="$2"; gen="$3"
cc=${CC:-cc}; cxx=${CXX:-c++}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
: > "$tmp/declared"
for path in "$inc"/weft/*.h; do
  h=$(basename "$path")
  printf '#include <weft/%s>\n#include <weft/%s>\nint main(void) { return 0; }\n' "$h" "$h" > "$tmp/alone.c"
  if ! $cc -std=c99 -Wall -Wextra -pedantic -Wstrict-prototypes -Werror -I"$inc" -I"$gen" -o "$tmp/alone" "$tmp/alone.c"; then
    echo "headers.sh: weft/$h does not compile alone as C99"; fail=1
  fi
  # Function names: a return type at the start of a line, then the name and "(".
  names=$(sed -n 's/^\(weftResult_t\|const char\*\) \(weft[A-Za-z0-9]*\)(.*/\2/p' "$path")
  {
    printf '#include <weft/%s>\n#include <weft/%s>\nint main() {\n  void (*volatile fns[])() = {0' "$h" "$h"
    for n in $names; do printf ',\n    reinterpret_cast<void (*)()>(&%s)' "$n"; done
    printf '};\n  return fns[0] == 0 ? 0 : 1;\n}\n'
  } > "$tmp/alone.cc"
  if ! $cxx -std=c++11 -Wall -Wextra -pedantic -Werror -I"$inc" -I"$gen" -o "$tmp/alone_cxx" "$tmp/alone.cc" "$lib"; then
    echo "headers.sh: weft/$h does not compile alone as C++, or declares a function without C linkage"; fail=1
  fi
  [ "$h" = weft.h ] || for n in $names; do echo "$n $h" >> "$tmp/declared"; done
done
for f in $(nm -D --defined-only "$lib" | awk '$2 == "T" && $3 ~ /^weft/ {print $3}' | sed 's/@.*//'); do
  count=$(awk -v f="$f" '$1 == f' "$tmp/declared" | wc -l)
  if [ "$count" -ne 1 ]; then
    echo "headers.sh: $f is exported but declared in $count subsystem headers: $(awk -v f="$f" '$1 == f {print $2}' "$tmp/declared" | tr '\n' ' ')"
    fail=1
  fi
done
for h in types.h comm.h collectives.h stream.h kernels.h reducer.h shard.h; do
  grep -q "#include \"weft/$h\"" "$inc/weft/weft.h" || { echo "headers.sh: weft.h does not include weft/$h"; fail=1; }
done
[ "$fail" -eq 0 ] || exit 1
echo "headers.sh: $(ls "$inc"/weft/*.h | wc -l) headers compile alone as C99 and C++; $(wc -l < "$tmp/declared") functions, each in one header, with C linkage"
