#!/usr/bin/env bash
# The core's footprint (docs/c-sdk.md, "Footprint"): code size of the sans-I/O core
# (src/*.c: no transport, no examples) for Cortex-M4 (arm-none-eabi-gcc -Os -mthumb)
# and x86-64 (gcc -Os), the RAM of struct vrt_client, and the largest stack frames.
# Usage: clients/c/tools/footprint.sh  (needs gcc-arm-none-eabi and libjsmn-dev)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
sources=(vrt_gen vrt_json vrt_decode vrt_jw vrt_client)
flags=(-std=c99 -Os -ffunction-sections -fdata-sections -Wall -Wextra -Werror -I"$here/include")

build() { # target compiler extra-flags...
  local target=$1 cc=$2
  shift 2
  mkdir -p "$out/$target"
  for f in "${sources[@]}"; do
    "$cc" "${flags[@]}" "$@" -fstack-usage -c "$here/src/$f.c" -o "$out/$target/$f.o"
  done
  printf '#include "vrt/client.h"\nchar vrt_client_size[sizeof(vrt_client)];\n' >"$out/$target/probe.c"
  "$cc" "${flags[@]}" "$@" -c "$out/$target/probe.c" -o "$out/$target/probe.o"
}

# jsmn.h is found after the target's own headers (-idirafter): never the host's libc.
build cortex-m4 arm-none-eabi-gcc -mcpu=cortex-m4 -mthumb -idirafter /usr/include
build x86-64 gcc

echo "| Target | text (code + constants) | data | bss | struct vrt_client (RAM) | largest stack frame |"
echo "|---|---|---|---|---|---|"
for target in cortex-m4 x86-64; do
  size_tool=size nm_tool=nm
  [ "$target" = cortex-m4 ] && size_tool=arm-none-eabi-size nm_tool=arm-none-eabi-nm
  read -r text data bss _ < <("$size_tool" -t "$out/$target"/vrt_*.o | tail -1)
  ram=$(( 16#$("$nm_tool" -S "$out/$target/probe.o" | awk '/vrt_client_size/ {print $2}') ))
  frame=$(cat "$out/$target"/*.su | sort -t$'\t' -k2 -n | tail -1 | awk -F'\t' '{print $2 " B (" $1 ")"}')
  frame=${frame//$here\//}
  echo "| $target | $text B | $data B | $bss B | $ram B | $frame |"
done
