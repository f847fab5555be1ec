#!/bin/sh
# A framework backend builds against an installed weft with pkg-config alone:
#   cc app.c $(pkg-config --cflags --libs weft)
set -eu
build="$1"; src="$2"; headers="$3"
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
# --no-rebuild: installs what is built (the test depends on libweft); a build
# of only some suites' targets (tools/sanitize) must not build the rest here.
meson install -C "$build" --no-rebuild --destdir "$dest" --quiet >/dev/null
prefix=$(meson introspect "$build" --buildoptions | /usr/bin/python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"][0])')
libdir=$(meson introspect "$build" --buildoptions | /usr/bin/python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]=="libdir"][0])')
pc=$(find "$dest" -name weft.pc | head -1)
[ -n "$pc" ] || { echo "install.sh: weft.pc was not installed"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
# Every public header is installed, under weft/.
for h in "$headers"/*.h; do
  [ -f "$dest$prefix/include/weft/$(basename "$h")" ] || { echo "install.sh: weft/$(basename "$h") was not installed"; exit 1; }
done
# The .pc file names the final prefix; point it into the staging directory.
flags=$(pkg-config --define-variable=prefix="$dest$prefix" --cflags --libs weft)
cc -std=c99 -Wall -Wextra -Werror -o "$dest/app" "$src" $flags
LD_LIBRARY_PATH="$dest$prefix/$libdir" "$dest/app"
echo "install.sh: built and ran a C program against the installed weft via pkg-config ($flags)"
