#!/usr/bin/env bash
# Build json-fill.wasm (kstage renderer plugin, JavaScript) with componentize-js.
# Called by plugins/build, which sets OUT, WIT and PATH; runnable alone as well.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
WIT="${WIT:-$here/../../../wit}"
OUT="${OUT:-$here/../../../target/plugins}"
mkdir -p "$OUT"

# Every WASI feature componentize-js can leave out: the plugin only computes, and
# kstage grants no files, env, sockets or stdout anyway.
componentize-js "$here/renderer.js" \
  --wit "$WIT" \
  --world-name renderer-plugin \
  --disable stdio random clocks http fetch-event \
  --out "$OUT/json-fill.wasm"

wasm-tools validate "$OUT/json-fill.wasm"
echo "js: $OUT/json-fill.wasm ($(wc -c <"$OUT/json-fill.wasm") bytes)"
