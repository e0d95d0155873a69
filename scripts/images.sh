#!/usr/bin/env bash
# make images: builds modelplane's container image (the platform's
# processes and the built-in runtime are one binary) without a container
# daemon and without pulling a base image, and writes it to OUT (default
# bin/images) as modelplane.oci.tar (an OCI image layout: skopeo copy
# oci-archive:…, crane push, podman load, ctr image import) and
# modelplane.docker.tar (docker load). tools/image assembles it from the
# binary built here with -trimpath, ONNX Runtime's library from the cache
# install-deps.sh fills, and the shared libraries both load, taken from
# this machine; every time stamp is the last commit's time (or
# $SOURCE_DATE_EPOCH), so the same tree on the same Debian gives the same
# digest. Prints the image's name and digest.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/bin/images}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
ort_version="$(sed -n 's/^ort_version=//p' "$root/scripts/install-deps.sh")"
ort_lib="${MP_ONNXRUNTIME_LIB:-${XDG_CACHE_HOME:-$HOME/.cache}/modelplane/onnxruntime-$ort_version/libonnxruntime.so.1}"
if [ ! -f "$ort_lib" ]; then
  echo "images: ONNX Runtime's library is missing ($ort_lib): run scripts/install-deps.sh" >&2
  exit 1
fi
cd "$root"
version="$(git describe --tags --always --dirty 2>/dev/null || echo devel)"
epoch="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
go build -trimpath -o "$out/modelplane" ./cmd/modelplane
(cd tools/image && go run . -binary "$out/modelplane" -onnxruntime "$ort_lib" \
  -onnxruntime-version "$ort_version" -out "$out" -tag "modelplane/modelplane:$version" \
  -version "$version" -epoch "$epoch")
rm -f "$out/modelplane"
