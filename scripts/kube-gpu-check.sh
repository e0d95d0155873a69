#!/usr/bin/env bash
# What the tests cannot show without a kubelet, a device plugin and a CNI
# (docs/kubernetes.md, "What a real GPU cluster still has to show"), checked
# on a real cluster with the NVIDIA GPU operator where a cluster agent runs
# (--driver kubernetes) and an endpoint of POOL has a ready replica.
# Read-only but for one test pod it deletes again; needs kubectl and jq.
#
#   KUBECONFIG=… scripts/kube-gpu-check.sh POOL
set -euo pipefail
pool=${1:?usage: kube-gpu-check.sh POOL}
sel="modelplane.io/pool=$pool"

echo "== 1. what the operator advertises (the agent's inventory reads these)"
kubectl get nodes -o json | jq -r '.items[] | [.metadata.name, .metadata.labels["nvidia.com/gpu.product"] // "-",
  .metadata.labels["nvidia.com/mig.strategy"] // "-",
  (.status.allocatable | with_entries(select(.key | startswith("nvidia.com/"))) | tostring)] | @tsv'

echo "== 2. each replica pod's devices, as the container sees them"
kubectl get pods -A -l "$sel" -o json | jq -r '.items[] | select(.status.phase=="Running") | "\(.metadata.namespace) \(.metadata.name)"' |
while read -r ns pod; do
  echo "-- $ns/$pod: requests $(kubectl get pod -n "$ns" "$pod" -o jsonpath='{.spec.containers[0].resources.requests}')"
  kubectl exec -n "$ns" "$pod" -c runtime -- nvidia-smi -L 2>&1 || echo "(no nvidia-smi in the image: compare with kubectl describe node)"
done

echo "== 3/4. replica states the pods report (Ready, restarts, last termination)"
kubectl get pods -A -l "$sel" -o json | jq -r '.items[] | [.metadata.name, .status.phase,
  ([.status.conditions[]? | select(.type=="Ready") | .status] | first // "-"),
  ([.status.containerStatuses[]? | "\(.name):restarts=\(.restartCount):\(.lastState.terminated.reason // "-")"] | join(","))] | @tsv'

echo "== 5. the NetworkPolicy: a pod that is not a gateway must not reach a replica"
target=$(kubectl get pods -A -l "$sel" -o jsonpath='{.items[0].status.podIP}')
ns=$(kubectl get pods -A -l "$sel" -o jsonpath='{.items[0].metadata.namespace}')
if [ -n "$target" ]; then
  if kubectl run -n "$ns" mp-netcheck --rm -i --restart=Never --image=busybox:1.36 -- \
       wget -T 5 -qO- "http://$target:8000/v2/health/live" >/dev/null 2>&1; then
    echo "FAIL: an ordinary pod reached $target:8000 (is the CNI enforcing NetworkPolicy?)"
  else
    echo "ok: refused"
  fi
fi

echo "== 6. the init containers' downloads"
kubectl get pods -A -l "$sel" -o name | head -3 | while read -r p; do
  kubectl logs -n "$ns" "$p" -c fetch --tail=3 2>/dev/null || true
done
