#!/usr/bin/env bash
# Builds the Kubernetes control plane that internal/kubetest runs tests
# against: kube-apiserver, kube-scheduler and kube-controller-manager from
# k8s.io/kubernetes, and etcd from go.etcd.io/etcd/server, at the versions
# tools/kube/go.mod pins (a module of its own, so none of this reaches the
# product's go.mod). Nothing is downloaded but Go modules: the programs are
# compiled from source, once per machine, into a cache directory outside the
# clone named by version, the way install-deps.sh keeps ONNX Runtime:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/modelplane/kube-v1.37.2/bin/
#
# A stamp there records the sha256 of tools/kube/go.mod and go.sum; when
# either changes the programs are built again. A cold build takes a long
# time (the apiserver alone is the bulk of it; see docs/kubernetes.md), a
# warm one is a stamp check. Prints the bin directory on stdout, which
# internal/kubetest also finds by itself (or at $MP_KUBE_BIN).
# Called by `scripts/install-deps.sh test`; safe to run again, and to run
# twice at once (the second waits on a lock).
set -euo pipefail

kube_version=v1.37.2
root="$(cd "$(dirname "$0")/.." && pwd)"
mod="$root/tools/kube"
dir="${XDG_CACHE_HOME:-$HOME/.cache}/modelplane/kube-$kube_version"
bin="$dir/bin"
stamp="$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -d' ' -f1)"

built() {
  [ -f "$dir/stamp" ] && [ "$(cat "$dir/stamp")" = "$stamp" ] &&
    for p in etcd kube-apiserver kube-scheduler kube-controller-manager; do
      [ -x "$bin/$p" ] || return 1
    done
}

if built; then echo "$bin"; exit 0; fi
mkdir -p "$dir"
exec 9>"$dir/lock"
flock 9
if built; then echo "$bin"; exit 0; fi

echo "building Kubernetes $kube_version and etcd into $bin (once per machine; a cold build takes many minutes)" >&2
start=$(date +%s)
rm -rf "$bin.tmp"
mkdir -p "$bin.tmp"
# The version the programs report (kubectl version, /version) is set the way
# Kubernetes' own release build sets it; the fixed build date and -trimpath
# keep the build reproducible. CGO is off, as in Kubernetes' release build.
v=k8s.io/component-base/version
minor="${kube_version#v1.}"; minor="${minor%%.*}"
ldflags="-s -w -X $v.gitVersion=$kube_version -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z"
(cd "$mod" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -ldflags "$ldflags" -o "$bin.tmp/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  ./etcd)
rm -rf "$bin"
mv "$bin.tmp" "$bin"
echo "$stamp" >"$dir/stamp"
echo "built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
