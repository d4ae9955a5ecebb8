#!/usr/bin/env bash
# Build the exp-backoff classifier (Zig) into $OUT/exp-backoff.wasm.
#
# Called by plugins/build with OUT (output folder) and WIT (kstage's WIT folder) set;
# it also runs standalone with the defaults below. The C bindings and their Zig
# translation are generated into $OUT/build/zig on every build and never committed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:-$here/../../../target/plugins}"
WIT="${WIT:-$here/../../../wit}"
build="$OUT/build/zig"
zig() { python3 -m ziglang "$@"; }
# Zig keeps its per-build cache out of the source tree (its global cache, with the
# compiled libc, stays in ~/.cache/zig and makes rebuilds fast).
export ZIG_LOCAL_CACHE_DIR="$build/zig-cache"

rm -rf "$build"
mkdir -p "$build"

# 1. C bindings for the classifier-plugin world, and their header as a Zig module
#    (Zig has no @cImport any more: translate-c is the way in).
wit-bindgen c --world classifier-plugin --out-dir "$build" "$WIT" >/dev/null
zig translate-c -target wasm32-wasi -lc -I "$build" "$build/classifier_plugin.h" >"$build/bindings.zig"

# 2. A core module: the bindings' C file plus exp_backoff.zig, in WASI's reactor model
#    (no main). Zig's own libc supplies malloc/realloc/free/strlen; nothing calls a
#    WASI function, so the module imports nothing from WASI. The exports are the
#    ones the bindings name with export_name, so no -rdynamic.
zig build-exe -target wasm32-wasi -O ReleaseSmall -mexec-model=reactor -fno-entry -lc \
  --stack 65536 -femit-bin="$build/exp-backoff.core.wasm" \
  -I "$build" -cflags -std=c11 -Wall -Werror -- \
  "$build/classifier_plugin.c" "$build/classifier_plugin_component_type.o" \
  --dep bindings -Mroot="$here/exp_backoff.zig" -Mbindings="$build/bindings.zig"

# A plugin with a WASI import would need an adapter; make sure there is none.
if wasm-tools print "$build/exp-backoff.core.wasm" | grep -E '^\s*\(import ' | grep -v '"kstage:plugin/'; then
  echo "exp-backoff: unexpected import in the core module (see above)" >&2
  exit 1
fi

# 3. The component.
wasm-tools component new "$build/exp-backoff.core.wasm" -o "$OUT/exp-backoff.wasm"
wasm-tools validate --features component-model "$OUT/exp-backoff.wasm"
echo "built $OUT/exp-backoff.wasm ($(wc -c <"$OUT/exp-backoff.wasm") bytes)"
