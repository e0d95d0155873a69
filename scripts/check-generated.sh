#!/usr/bin/env bash
# Fails when the committed generated code does not match its sources, and
# prints what is stale, without touching the working tree (make verify):
#   - sqlc: `sqlc diff` compares db/ with what queries/ and migrations/
#     generate;
#   - templ: web/ is generated again in a scratch copy and compared.
# To fix, run `make generate` and commit db/ and web/.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
if ! go tool sqlc diff; then
  echo "sqlc: db/ is stale against queries/ and migrations/" >&2
  status=1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp go.mod "$tmp/" # templ checks its version against go.mod
cp -R web "$tmp/web"
if ! out=$(go tool templ generate -path "$tmp/web" 2>&1); then
  echo "$out" >&2
  echo "templ: generate failed" >&2
  status=1
elif ! diff -ru web "$tmp/web"; then
  echo "templ: web/*_templ.go are stale against web/*.templ" >&2
  status=1
fi
exit $status
