#!/usr/bin/env bash
# Build the retry-budget classifier (C) into $OUT/retry-budget.wasm.
#
# Called by plugins/build with OUT (output folder) and WIT (kstage's WIT folder) set;
# it also runs standalone with the defaults below. The bindings are generated into
# $OUT/build/c on every build and never committed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:-$here/../../../target/plugins}"
WIT="${WIT:-$here/../../../wit}"
CC="${CC:-clang-22}"
build="$OUT/build/c"

rm -rf "$build"
mkdir -p "$build"

# 1. C bindings for the classifier-plugin world.
wit-bindgen c --world classifier-plugin --out-dir "$build" "$WIT" >/dev/null

# 2. A core module in wasi-libc's reactor model: no main, exports only what the
#    bindings define (plus `_initialize`, which runs constructors once). Nothing here
#    calls stdio or any other WASI function, so the module imports only kstage's host.
#    (--target=wasm32-wasi, not wasip1: Debian's wasi-libc lives under wasm32-wasi.)
"$CC" --target=wasm32-wasi -Wno-deprecated \
  -O2 -std=c11 -Wall -Wextra -Werror \
  -mexec-model=reactor \
  -I "$build" \
  -Wl,--strip-debug \
  -o "$build/retry-budget.core.wasm" \
  "$here/retry_budget.c" \
  "$build/classifier_plugin.c" \
  "$build/classifier_plugin_component_type.o"

# A plugin with a WASI import would need an adapter; make sure there is none.
if wasm-tools print "$build/retry-budget.core.wasm" | grep -E '^\s*\(import ' | grep -v '"kstage:plugin/'; then
  echo "retry-budget: unexpected import in the core module (see above)" >&2
  exit 1
fi

# 3. The component.
wasm-tools component new "$build/retry-budget.core.wasm" -o "$OUT/retry-budget.wasm"
wasm-tools validate --features component-model "$OUT/retry-budget.wasm"
echo "built $OUT/retry-budget.wasm ($(wc -c <"$OUT/retry-budget.wasm") bytes)"
