#!/usr/bin/env bash
# Build {{name}}.wasm, a kstage {{capability}} plugin (JavaScript), beside this script.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tools="${KSTAGE_TOOLS:-$HOME/.cache/kstage-tools}"
export PATH="$tools/bin:$tools/npm/node_modules/.bin:$PATH"

# 1. The tools, all checked before anything is built.
missing=()
command -v node >/dev/null 2>&1 || missing+=("node not found: sudo apt-get install nodejs npm")
componentize-js --version >/dev/null 2>&1 ||
  missing+=("componentize-js not found: npm install -g @bytecodealliance/componentize-js@{{COMPONENTIZE_JS_VERSION}}")
if [ ${#missing[@]} -gt 0 ]; then
  printf '{{name}}: missing: %s\n' "${missing[@]}" >&2
  exit 1
fi

# 2. The plugin loads in plain Node (a syntax error shows here, with its line).
node --check "$here/plugin.js"

# 3. The component, for the {{capability}}-plugin world. Every WASI feature
#    componentize-js can leave out is left out: the plugin only computes.
componentize-js "$here/plugin.js" --wit "$here/wit" --world-name {{capability}}-plugin \
  --disable stdio random clocks http fetch-event --out "$here/{{name}}.wasm"
echo "built $here/{{name}}.wasm ($(wc -c <"$here/{{name}}.wasm") bytes)"
