#!/usr/bin/env bash
# Installs what modelplane needs on Debian/Ubuntu and is missing: PostgreSQL and
# ClickHouse for `make run`; Chromium as well for `make test` (pass "test").
# Called by both make targets; safe to run again.
set -euo pipefail

want=()
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || command -v postgres >/dev/null || want+=(postgresql)
command -v clickhouse-server >/dev/null || want+=(clickhouse-server)
if [ "${1:-}" = test ]; then
  command -v chromium >/dev/null || want+=(chromium)
  # The tree-model runtime tests compare with the real libraries' predictions.
  /usr/bin/python3 -c 'import xgboost' 2>/dev/null || want+=(python3-xgboost)
  /usr/bin/python3 -c 'import sklearn' 2>/dev/null || want+=(python3-sklearn)
fi
[ ${#want[@]} -eq 0 ] && exit 0

echo "installing: ${want[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${want[@]}" >/dev/null
# The distribution starts its own clusters and servers; modelplane runs private
# ones as child processes, so stop the system-wide ones to free memory and ports.
if [[ " ${want[*]} " == *" postgresql "* ]]; then $sudo service postgresql stop >/dev/null 2>&1 || true; fi
if [[ " ${want[*]} " == *" clickhouse-server "* ]]; then $sudo service clickhouse-server stop >/dev/null 2>&1 || true; fi
