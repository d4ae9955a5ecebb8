#!/usr/bin/env bash
# Build the wasi-probe test plugin: $OUT/wasi-probe.wasm (a classifier component).
# Called by plugins/examples/python/build.sh, so `plugins/build python` builds it too.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
OUT="${OUT:-$root/target/plugins}"
WIT="${WIT:-$root/wit}"
build="$OUT/build/python/wasi-probe"

command -v componentize-py >/dev/null || {
  echo "wasi-probe: componentize-py not found (run plugins/build --install python)" >&2
  exit 1
}

# Build from a copy of the sources so nothing (bytecode caches) lands in the repository.
rm -rf "$build"
mkdir -p "$build/src" "$OUT"
cp "$here/probe.py" "$build/src/"
# Stub bindings, for editors and type checkers only; componentize generates its own.
componentize-py -q -d "$WIT" -w classifier-plugin bindings "$build/bindings"
componentize-py -q -d "$WIT" -w classifier-plugin componentize \
  -p "$build/src" -o "$OUT/wasi-probe.wasm" probe
echo "wasi-probe: $OUT/wasi-probe.wasm ($(stat -c %s "$OUT/wasi-probe.wasm") bytes)"
