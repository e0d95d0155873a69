#!/usr/bin/env bash
# Installs what modelplane needs on Debian/Ubuntu and is missing: PostgreSQL and
# ClickHouse for `make run`; Chromium as well for `make test` (pass "test");
# and ONNX Runtime's shared library for the built-in runtime (both).
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
  # The shipped alert rules and every process's /metrics are checked with
  # promtool (Debian's prometheus package); alerts are delivered to a real
  # Alertmanager (prometheus-alertmanager).
  command -v promtool >/dev/null || want+=(prometheus)
  command -v prometheus-alertmanager >/dev/null || want+=(prometheus-alertmanager)
fi

# ONNX (runtime/onnx). Its tests build MLPs with Debian's python3-onnx and
# python3-numpy (/usr/bin/python3, where Debian installs them) and run ONNX's
# own operator tests from libonnx-testdata. The LLM runtime's tests (llm)
# compare its logits with a NumPy forward pass, so they need python3-numpy too.
if [ "${1:-}" = test ]; then
  /usr/bin/python3 -c 'import onnx' >/dev/null 2>&1 || want+=(python3-onnx)
  /usr/bin/python3 -c 'import numpy' >/dev/null 2>&1 || want+=(python3-numpy)
  [ -d /usr/share/libonnx-testdata/data/node ] || want+=(libonnx-testdata)
fi
# ONNX Runtime's shared library, which runtime/onnx opens at run time (dlopen
# through github.com/yalue/onnxruntime_go). Debian does not package ONNX
# Runtime, and the npm package onnxruntime-node ships the official Linux build
# in its tarball, so it is fetched with npm pack and only that one file is
# kept. It goes to a cache directory outside the clone (the file is 45 MB and
# must never be committed), named by version so that an upgrade fetches the
# new one beside the old; runtime/onnx looks there by default, or at
# $MP_ONNXRUNTIME_LIB. The sha256 pins the exact build the tests were run with.
ort_version=1.30.0
ort_dir="${XDG_CACHE_HOME:-$HOME/.cache}/modelplane/onnxruntime-$ort_version"
ort_lib="$ort_dir/libonnxruntime.so.1"
case "$(uname -m)" in
  x86_64) ort_arch=x64 ort_sha256=ffb75a925ba05e47b235bb66e3e3911714a80b328a9c9425539feb204aa32a23 ;;
  aarch64) ort_arch=arm64 ort_sha256=1f549d46250b005580b597f4164984aaf75b3bcb9f3aeb07c7f8a8fe60b23c76 ;;
  *) ort_arch="" ;;
esac
ort_want=false
if [ ! -f "$ort_lib" ] && [ -n "$ort_arch" ]; then
  ort_want=true
  command -v npm >/dev/null || want+=(npm)
fi

# The OpenAI client test (gateway/openai_client_test.go) runs the official
# npm openai package under Node against a real gateway. The package goes to
# a cache directory outside the clone, named by version, which the test
# reads (or $MP_OPENAI_NODE_DIR); the test fails, naming this script, when
# it is missing. 6.10.0 is the last release that runs on Node 20 (7.x wants
# 22) and has no dependencies of its own.
openai_version=6.10.0
openai_dir="${XDG_CACHE_HOME:-$HOME/.cache}/modelplane/openai-node-$openai_version"
openai_want=false
if [ "${1:-}" = test ] && [ ! -f "$openai_dir/node_modules/openai/package.json" ]; then
  openai_want=true
  command -v node >/dev/null || want+=(nodejs)
  command -v npm >/dev/null || want+=(npm)
fi

# The tokenizer runtime's test (runtime/tokenizer) checks its encodings
# against Hugging Face's own JavaScript tokenizers, the npm package
# @huggingface/tokenizers (no dependencies), run under Node; cached outside
# the clone by version like openai-node ($MP_HF_TOKENIZERS_DIR overrides).
hftok_version=0.2.0
hftok_dir="${XDG_CACHE_HOME:-$HOME/.cache}/modelplane/hf-tokenizers-$hftok_version"
hftok_want=false
if [ "${1:-}" = test ] && [ ! -f "$hftok_dir/node_modules/@huggingface/tokenizers/package.json" ]; then
  hftok_want=true
  command -v node >/dev/null || want+=(nodejs)
  command -v npm >/dev/null || want+=(npm)
fi

# The OpenAPI lint test (handlers/api_redocly_test.go) runs Redocly's CLI,
# the npm package @redocly/cli, on the served document; cached outside the
# clone by version like openai-node ($MP_REDOCLY_CLI_DIR overrides). 2.77.0
# runs on Node 20.19 or later.
redocly_version=2.77.0
redocly_dir="${XDG_CACHE_HOME:-$HOME/.cache}/modelplane/redocly-cli-$redocly_version"
redocly_want=false
if [ "${1:-}" = test ] && [ ! -f "$redocly_dir/node_modules/@redocly/cli/package.json" ]; then
  redocly_want=true
  command -v node >/dev/null || want+=(nodejs)
  command -v npm >/dev/null || want+=(npm)
fi

if [ ${#want[@]} -gt 0 ]; then
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
  if [[ " ${want[*]} " == *" prometheus "* ]]; then $sudo service prometheus stop >/dev/null 2>&1 || true; fi
  if [[ " ${want[*]} " == *" prometheus-alertmanager "* ]]; then $sudo service prometheus-alertmanager stop >/dev/null 2>&1 || true; fi
fi

if [ -z "$ort_arch" ] && [ ! -f "$ort_lib" ]; then
  echo "onnxruntime: no build for $(uname -m) in onnxruntime-node; ONNX models will not load" >&2
fi
if $ort_want; then
  echo "fetching ONNX Runtime $ort_version (npm onnxruntime-node) into $ort_dir"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  # A private npm cache, so the 110 MB tarball does not stay in ~/.npm.
  (cd "$tmp" && npm pack --silent --cache "$tmp/npm-cache" "onnxruntime-node@$ort_version" >/dev/null)
  tar -xzf "$tmp/onnxruntime-node-$ort_version.tgz" -C "$tmp" --wildcards \
    "package/bin/napi-v*/linux/$ort_arch/libonnxruntime.so.1*"
  found=("$tmp"/package/bin/napi-v*/linux/"$ort_arch"/libonnxruntime.so.1*)
  echo "$ort_sha256  ${found[0]}" | sha256sum -c --quiet -
  mkdir -p "$ort_dir"
  # Copied under a temporary name and renamed, so that an interrupted fetch
  # never leaves a truncated library where the runtime looks.
  cp "${found[0]}" "$ort_lib.tmp"
  mv "$ort_lib.tmp" "$ort_lib"
fi

# npm_install DIR PACKAGE@VERSION installs one npm package into DIR, beside
# it first and then renamed, so that an interrupted install never leaves a
# half package where a test looks; with a private npm cache, so nothing
# stays in ~/.npm.
npm_install() {
  echo "installing the npm package $2 into $1"
  local npm_tmp
  npm_tmp="$(mktemp -d)"
  rm -rf "$1.tmp"
  mkdir -p "$1.tmp"
  npm install --silent --no-audit --no-fund --cache "$npm_tmp/npm-cache" --prefix "$1.tmp" "$2" >/dev/null
  rm -rf "$npm_tmp" "$1"
  mv "$1.tmp" "$1"
}
if $openai_want; then npm_install "$openai_dir" "openai@$openai_version"; fi
if $hftok_want; then npm_install "$hftok_dir" "@huggingface/tokenizers@$hftok_version"; fi
if $redocly_want; then npm_install "$redocly_dir" "@redocly/cli@$redocly_version"; fi

# The Kubernetes control plane (etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager) that internal/kubetest runs the kubernetes
# driver's and the chart's tests against, compiled from the Go module proxy
# once per machine into a cache outside the clone (scripts/kube-tools.sh).
if [ "${1:-}" = test ]; then
  "$(dirname "$0")/kube-tools.sh" >/dev/null
fi
