#!/usr/bin/env bash
# Regenerates internal/pb from the public proto (proto/budget/v1/budget.proto).
# Needs protoc, protoc-gen-go (protobuf-go's, not Debian's old /usr/bin one) and
# protoc-gen-go-grpc on PATH; scripts/ci.sh builds protoc-gen-go from Debian's sources.
#
#   scripts/generate.sh          rewrites this module's internal/pb
#   scripts/generate.sh DIR      writes DIR/internal/pb instead (CI compares it with ours)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-.}"
module=github.com/budgetd/budgetd/clients/go
map="Mbudget/v1/budget.proto=$module/internal/pb;pb"
mkdir -p "$out/internal/pb"
rm -f "$out"/internal/pb/*.pb.go
protoc -I../../proto \
  --go_out="$out" --go_opt="module=$module,$map" \
  --go-grpc_out="$out" --go-grpc_opt="module=$module,$map" \
  ../../proto/budget/v1/budget.proto
