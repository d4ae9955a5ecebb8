#!/usr/bin/env bash
# Build the Python example: $OUT/label-router.wasm (a selector component), and the
# wasi-probe test plugin ($OUT/wasi-probe.wasm) that kstage's tests use.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
export OUT="${OUT:-$root/target/plugins}"
export WIT="${WIT:-$root/wit}"
build="$OUT/build/python/label-router"

command -v componentize-py >/dev/null || {
  echo "label-router: componentize-py not found (run plugins/build --install python)" >&2
  exit 1
}

# Build from a copy of the sources so nothing (bytecode caches) lands in the repository.
rm -rf "$build"
mkdir -p "$build/src" "$OUT"
cp "$here/app.py" "$build/src/"
# Stub bindings, for editors and type checkers only; componentize generates its own.
componentize-py -q -d "$WIT" -w selector-plugin bindings "$build/bindings"
# kstage's Python SDK (plugins/sdk/python), tested first in plain Python.
(cd "$root/plugins/sdk/python" && python3 -B -m unittest -q test_kstage_plugin)
componentize-py -q -d "$WIT" -w selector-plugin componentize \
  -p "$build/src" -p "$root/plugins/sdk/python" -o "$OUT/label-router.wasm" app
echo "label-router: $OUT/label-router.wasm ($(stat -c %s "$OUT/label-router.wasm") bytes)"

"$root/tests/plugins/wasi-probe/build.sh"
