#!/usr/bin/env bash
# Regenerates sqlc and templ code and fails when that changed anything: the
# committed generated code must match its sources.
set -euo pipefail
sum() { find db web -name '*.go' -type f 2>/dev/null | sort | xargs cat 2>/dev/null | sha256sum; }
before=$(sum)
go tool sqlc generate
go tool templ generate -path web >/dev/null
after=$(sum)
if [ "$before" != "$after" ]; then
  echo "generated code was stale (sqlc or templ); it has been regenerated: commit db/ and web/" >&2
  exit 1
fi
