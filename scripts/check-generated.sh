#!/usr/bin/env bash
# Fails when the committed generated code does not match its sources, and
# prints what is stale, without touching the working tree (make verify):
#   - sqlc: `sqlc diff` compares db/ with what queries/ and migrations/
#     generate;
#   - templ: web/ is generated again in a scratch copy and compared;
#   - llm/matmul512_amd64.s: llm/matmul512_gen.py is run again in a
#     scratch folder (/usr/bin/python3, standard library only) and its
#     output compared; skipped with a line when there is no python3.
# To fix, run `make generate` and commit db/ and web/; for the assembly,
# `go generate ./llm` and commit llm/matmul512_amd64.s.
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
py=/usr/bin/python3
if [ ! -x "$py" ]; then
  echo "llm: $py not found, matmul512_amd64.s not checked" >&2
else
  mkdir "$tmp/llm"
  cp llm/matmul512_gen.py "$tmp/llm/"
  if ! (cd "$tmp/llm" && "$py" matmul512_gen.py); then
    echo "llm: matmul512_gen.py failed" >&2
    status=1
  elif ! diff -u llm/matmul512_amd64.s "$tmp/llm/matmul512_amd64.s" >/dev/null; then
    echo "llm: matmul512_amd64.s is stale against matmul512_gen.py (go generate ./llm)" >&2
    status=1
  fi
fi
exit $status
