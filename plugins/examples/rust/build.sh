#!/usr/bin/env bash
# Build the chaos-router example plugin into $OUT/chaos-router.wasm.
#
# Usually run by `plugins/build rust`, which sets OUT. Needs Debian's rustc-web,
# cargo-web and rust-web-src (rustc >= 1.96 with its standard library sources: the
# standard library is built for wasm32-unknown-unknown with -Zbuild-std) and
# wasm-tools. Cargo's output goes to $OUT/build/rust, never into the repository.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
OUT="${OUT:-$repo/target/plugins}"
target_dir="$OUT/build/rust"
mkdir -p "$OUT"

# Debian's toolchain, not rustup's (which has no wasm target), whatever the caller's
# environment says.
unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS CARGO_BUILD_RUSTFLAGS RUSTC_WRAPPER \
  RUSTC_WORKSPACE_WRAPPER CARGO_TARGET_DIR CARGO_BUILD_TARGET RUSTUP_TOOLCHAIN RUSTDOC
export RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1
# Its own cargo home (package cache and its locks), so that a build beside it, such as
# CI's kstage build, never holds this one waiting.
export CARGO_HOME="${KSTAGE_TOOLS:-$HOME/.cache/kstage-tools}/cargo-home"
# Panic messages embed source paths: -Ztrim-paths names them relative to their package
# (`kstage-plugin-0.1.0/src/...`, `/rustc/<commit>/library/...`), so the component's bytes
# (and its sha256) do not depend on where the checkout and cargo's home live. Being a
# profile setting, not RUSTFLAGS, it also lets a plugin made by `kstage plugin new` share
# this target folder's standard library (its build.sh builds the same way).
export CARGO_PROFILE_RELEASE_TRIM_PATHS=all

/usr/bin/cargo build \
  --manifest-path "$here/Cargo.toml" \
  --locked --release \
  --target wasm32-unknown-unknown \
  -Zbuild-std=std,panic_abort -Ztrim-paths \
  --target-dir "$target_dir"

core="$target_dir/wasm32-unknown-unknown/release/chaos_router.wasm"
wasm-tools component new "$core" -o "$OUT/chaos-router.wasm"
wasm-tools validate --features component-model "$OUT/chaos-router.wasm"
echo "built $OUT/chaos-router.wasm ($(wc -c <"$OUT/chaos-router.wasm") bytes)"
