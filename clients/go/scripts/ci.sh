#!/usr/bin/env bash
# What CI runs for the Go client, on a Debian machine with Debian's Go packages (no module
# proxy): the generated code is current, gofmt is clean, go vet passes, and the tests pass
# with the race detector, the integration tests against a real budgetd.
#
#   BUDGETD_BIN=/path/to/budgetd clients/go/scripts/ci.sh
#
# Needs: golang-go, golang-google-grpc-dev, golang-google-protobuf-dev, protoc-gen-go-grpc,
# protobuf-compiler, golang-github-prometheus-client-golang-dev,
# golang-github-codahale-hdrhistogram-dev. Builds in GOPATH mode from a temporary GOPATH.
set -euo pipefail
module_dir="$(cd "$(dirname "$0")/.." && pwd)"
module=github.com/budgetd/budgetd/clients/go

: "${BUDGETD_BIN:?set BUDGETD_BIN to a budgetd binary (cargo build --bin budgetd)}"
[ -x "$BUDGETD_BIN" ] || { echo "ci.sh: BUDGETD_BIN=$BUDGETD_BIN is not an executable" >&2; exit 1; }
for tool in go gofmt protoc protoc-gen-go-grpc; do
  command -v "$tool" >/dev/null || { echo "ci.sh: $tool is missing (see the packages above)" >&2; exit 1; }
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export GO111MODULE=off GOFLAGS= GOCACHE="${GOCACHE:-$tmp/gocache}"

echo "== protoc-gen-go from Debian's protobuf-go sources"
GOPATH=/usr/share/gocode go build -o "$tmp/bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go

echo "== internal/pb is what the proto generates"
PATH="$tmp/bin:$PATH" "$module_dir/scripts/generate.sh" "$tmp/generated"
if ! diff -ru "$module_dir/internal/pb" "$tmp/generated/internal/pb"; then
  echo "ci.sh: internal/pb is stale: run PATH=<dir of protoc-gen-go>:\$PATH clients/go/scripts/generate.sh" >&2
  exit 1
fi

echo "== gofmt, go vet, go test -race (GOPATH mode)"
mkdir -p "$tmp/gopath/src/$(dirname "$module")"
ln -s "$module_dir" "$tmp/gopath/src/$module"
export GOPATH="$tmp/gopath:/usr/share/gocode"
cd "$tmp/gopath/src/$module"
unformatted="$(gofmt -l .)"
if [ -n "$unformatted" ]; then
  echo "ci.sh: not gofmt'ed:" >&2
  echo "$unformatted" >&2
  exit 1
fi
go vet ./...
BUDGETD_BIN="$BUDGETD_BIN" go test -race -count=1 -timeout 10m ./...
