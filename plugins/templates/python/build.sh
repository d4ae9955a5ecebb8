#!/usr/bin/env bash
# Build {{name}}.wasm, a kstage {{capability}} plugin (Python), beside this script.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tools="${KSTAGE_TOOLS:-$HOME/.cache/kstage-tools}"
export PATH="$tools/bin:$PATH"

# 1. The tools, all checked before anything is built.
missing=()
command -v python3 >/dev/null 2>&1 || missing+=("python3 not found: sudo apt-get install python3 python3-pip")
componentize-py --version >/dev/null 2>&1 ||
  missing+=("componentize-py not found: pip install componentize-py=={{COMPONENTIZE_PY_VERSION}}")
if [ ${#missing[@]} -gt 0 ]; then
  printf '{{name}}: missing: %s\n' "${missing[@]}" >&2
  exit 1
fi

# 2. Stub bindings, for editors and type checkers only (componentize makes its own).
componentize-py -q -d "$here/wit" -w {{capability}}-plugin bindings "$here/bindings"

# 3. The component: app.py with the SDK, for the {{capability}}-plugin world.
export PYTHONDONTWRITEBYTECODE=1
componentize-py -q -d "$here/wit" -w {{capability}}-plugin componentize \
  -p "$here" -p "$here/sdk/python" -o "$here/{{name}}.wasm" app
echo "built $here/{{name}}.wasm ($(wc -c <"$here/{{name}}.wasm") bytes)"
