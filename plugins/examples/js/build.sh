#!/usr/bin/env bash
# Build json-fill.wasm (kstage renderer plugin, JavaScript) with componentize-js.
# Called by plugins/build, which sets OUT, WIT and PATH; runnable alone as well.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
WIT="${WIT:-$here/../../../wit}"
OUT="${OUT:-$here/../../../target/plugins}"
mkdir -p "$OUT"

# kstage's JavaScript SDK (plugins/sdk/js), tested first in plain Node. componentize-js
# reads the modules beside the source, so the build works on a copy of renderer.js with
# the SDK next to it.
node --test "$here/../../sdk/js/kstage-plugin.test.mjs" >/dev/null
build="$OUT/build/js/json-fill"
rm -rf "$build" && mkdir -p "$build"
cp "$here/../../sdk/js/kstage-plugin.js" "$build/"
sed "s|'../../sdk/js/kstage-plugin.js'|'./kstage-plugin.js'|" "$here/renderer.js" >"$build/renderer.js"
grep -q "'./kstage-plugin.js'" "$build/renderer.js"

# Every WASI feature componentize-js can leave out: the plugin only computes, and
# kstage grants no files, env, sockets or stdout anyway.
componentize-js "$build/renderer.js" \
  --wit "$WIT" \
  --world-name renderer-plugin \
  --disable stdio random clocks http fetch-event \
  --out "$OUT/json-fill.wasm"

wasm-tools validate "$OUT/json-fill.wasm"
echo "js: $OUT/json-fill.wasm ($(wc -c <"$OUT/json-fill.wasm") bytes)"
