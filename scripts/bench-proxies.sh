#!/usr/bin/env bash
# Installs the reference proxies and load tool that `modelplane bench gateway`
# compares the gateway with (DESIGN.md section 13): nginx, HAProxy, Caddy and
# wrk, and nginx's Lua module and lua-cjson for the peer that does the
# gateway's work in nginx (bench/gateway_peer.go), from the distribution's
# packages. Idempotent: what is already installed is left alone. Needs root (or sudo) and apt-get; elsewhere it says what is
# missing and exits 0, since the benchmark skips proxies that are absent.
set -euo pipefail

want=()
for tool in nginx haproxy caddy wrk; do
	if ! command -v "$tool" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$tool" ]; then
		want+=("$tool")
	fi
done
if [ ! -e /usr/lib/nginx/modules/ngx_http_lua_module.so ]; then
	want+=(libnginx-mod-http-lua)
fi
if ! compgen -G "/usr/lib/*/lua/5.1/cjson.so" >/dev/null; then
	want+=(lua-cjson)
fi
if [ ${#want[@]} -eq 0 ]; then
	echo "bench-proxies: nginx (with its Lua module and lua-cjson), haproxy, caddy and wrk already installed"
	exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "bench-proxies: no apt-get; install by hand: ${want[*]}" >&2
	exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
		echo "bench-proxies: not root and no sudo; install by hand: ${want[*]}" >&2
		exit 0
	fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# --no-install-recommends keeps the packages' services and extras out; the
# benchmark starts each proxy itself with a generated config.
$sudo apt-get install -y -qq --no-install-recommends "${want[@]}"
# Debian's packages start system services on install where an init system
# runs; the benchmark does not need them, so stop them if they are running.
for svc in nginx haproxy caddy; do
	if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
		$sudo systemctl stop "$svc" || true
	fi
done
echo "bench-proxies: installed ${want[*]}"
