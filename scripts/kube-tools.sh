#!/usr/bin/env bash
# Builds the Kubernetes programs that tests run: the control plane
# internal/kubetest starts (kube-apiserver, kube-scheduler and
# kube-controller-manager from k8s.io/kubernetes, and etcd from
# go.etcd.io/etcd/server) at the versions tools/kube/go.mod pins, and the
# helm client that renders deploy/helm/modelplane in its test, at the
# version tools/helm/go.mod pins. Each is a module of its own, so none of
# this reaches the product's go.mod. Nothing is downloaded but Go modules:
# the programs are compiled from source, once per machine, into a cache
# directory outside the clone named by version, the way install-deps.sh
# keeps ONNX Runtime:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/modelplane/kube-v1.37.2/bin/
#   ${XDG_CACHE_HOME:-$HOME/.cache}/modelplane/helm-v4.3.2/bin/
#
# A stamp in each records the sha256 of its module's go.mod and go.sum;
# when either changes the programs are built again. A cold build takes a
# long time (kube-apiserver is the bulk of it; docs/kubernetes.md has the
# figure), a warm one is a stamp check. internal/kubetest finds the
# programs there by itself (or at $MP_KUBE_BIN, $MP_HELM).
# Called by `scripts/install-deps.sh test`; safe to run again, and to run
# twice at once (the second waits on a lock).
set -euo pipefail

kube_version=v1.37.2
helm_version=v4.3.2
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/modelplane"

# build NAME MODULE_DIR LDFLAGS PROGRAM... PACKAGE...: builds the packages
# into $cache/NAME/bin unless the stamp there matches the module.
build() {
  local name="$1" mod="$root/$2" ldflags="$3"
  shift 3
  local dir="$cache/$name" programs=() packages=()
  while [ "$1" != -- ]; do programs+=("$1"); shift; done
  shift
  packages=("$@")
  local bin="$dir/bin"
  local stamp
  stamp="$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -d' ' -f1)"
  built() {
    [ -f "$dir/stamp" ] && [ "$(cat "$dir/stamp")" = "$stamp" ] || return 1
    local p
    for p in "${programs[@]}"; do [ -x "$bin/$p" ] || return 1; done
  }
  built && return 0
  mkdir -p "$dir"
  exec 9>"$dir/lock"
  flock 9
  if built; then exec 9>&-; return 0; fi
  echo "building ${programs[*]} into $bin (once per machine; a cold build takes many minutes)" >&2
  local start
  start=$(date +%s)
  rm -rf "$bin.tmp"
  mkdir -p "$bin.tmp"
  # -trimpath and fixed version stamps keep the build reproducible; CGO is
  # off, as in Kubernetes' and Helm's release builds.
  (cd "$mod" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -ldflags "$ldflags" -o "$bin.tmp/" "${packages[@]}")
  rm -rf "$bin"
  mv "$bin.tmp" "$bin"
  echo "$stamp" >"$dir/stamp"
  exec 9>&-
  echo "built ${programs[*]} in $(( $(date +%s) - start ))s" >&2
}

# The version the Kubernetes programs report (/version) is set the way
# Kubernetes' own release build sets it.
v=k8s.io/component-base/version
minor="${kube_version#v1.}"; minor="${minor%%.*}"
build "kube-$kube_version" tools/kube \
  "-s -w -X $v.gitVersion=$kube_version -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z" \
  etcd kube-apiserver kube-scheduler kube-controller-manager -- \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  ./etcd
build "helm-$helm_version" tools/helm \
  "-s -w -X helm.sh/helm/v4/internal/version.version=$helm_version" \
  helm -- helm.sh/helm/v4/cmd/helm
echo "$cache/kube-$kube_version/bin"
echo "$cache/helm-$helm_version/bin"
