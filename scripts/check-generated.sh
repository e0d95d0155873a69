#!/usr/bin/env bash
# Fails when the committed generated code does not match its sources, and
# prints what is stale, without touching the working tree (make verify):
#   - sqlc: `sqlc diff` compares db/ with what queries/ and migrations/
#     generate;
#   - templ: web/ is generated again in a scratch copy and compared;
#   - llm/matmul512_amd64.s and llm/tileavx2_amd64.s: their generators
#     (llm/*_gen.py) are run again in a scratch folder (/usr/bin/python3,
#     standard library only) and the output compared; skipped with a line
#     when there is no python3.
# To fix, run `make generate` and commit db/ and web/; for the assembly,
# `go generate ./llm` and commit the .s files.
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
  echo "llm: $py not found, the generated assembly is not checked" >&2
else
  mkdir "$tmp/llm"
  for gen in matmul512 tileavx2; do
    cp "llm/${gen}_gen.py" "$tmp/llm/"
    if ! (cd "$tmp/llm" && "$py" "${gen}_gen.py"); then
      echo "llm: ${gen}_gen.py failed" >&2
      status=1
    elif ! diff -u "llm/${gen}_amd64.s" "$tmp/llm/${gen}_amd64.s" >/dev/null; then
      echo "llm: ${gen}_amd64.s is stale against ${gen}_gen.py (go generate ./llm)" >&2
      status=1
    fi
  done
fi
exit $status
