#!/usr/bin/env bash
# What the tests cannot show without a kubelet, a device plugin and a CNI
# (docs/kubernetes.md, "What a real GPU cluster still has to show"), checked
# on a real cluster with the NVIDIA GPU operator where a cluster agent runs
# (--driver kubernetes) and an endpoint of POOL has a ready replica.
# Read-only but for one test pod it deletes again; needs kubectl and jq
# (and openssl for a pool whose pods serve TLS).
#
#   KUBECONFIG=… scripts/kube-gpu-check.sh POOL [SERVER_NAME]
#
# SERVER_NAME is the pool's MP_KUBE_SERVER_NAME when it has one. With
# MP_GATEWAY_URL, MP_KEY and MP_ENDPOINT (an endpoint of the pool taking a
# {"instances": [...]} body in MP_BODY) it also sends one request through
# the gateway, which reaches a pod over TLS only when the route entry's
# server name verifies.
set -euo pipefail
pool=${1:?usage: kube-gpu-check.sh POOL [SERVER_NAME]}
server_name=${2:-$pool.replicas.modelplane.internal}
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
  # Any answer, even a TLS listener's 400 to plain HTTP, means the pod was
  # reached; only a timeout or a refusal is the policy at work.
  out=$(kubectl run -n "$ns" mp-netcheck --rm -i --restart=Never --image=busybox:1.36 -- \
        wget -T 5 -qO- "http://$target:8000/v2/health/live" 2>&1 || true)
  if echo "$out" | grep -qiE "timed out|refused|unreachable|no route"; then
    echo "ok: refused ($out)"
  else
    echo "FAIL: an ordinary pod reached $target:8000 (is the CNI enforcing NetworkPolicy?): $out"
  fi
fi

echo "== 6. the init containers' downloads, and the crashed runs a restarted pod keeps"
kubectl get pods -A -l "$sel" -o json | jq -r '.items[] | "\(.metadata.namespace) \(.metadata.name) \([.status.containerStatuses[]?.restartCount] | add // 0)"' |
head -5 | while read -r ns pod restarts; do
  echo "-- $ns/$pod fetch:"
  kubectl logs -n "$ns" "$pod" -c fetch --tail=3 2>&1 || true
  if [ "$restarts" -gt 0 ]; then
    # What the API's logs?previous=1 reads through the agent.
    echo "-- $ns/$pod runtime, previous run:"
    kubectl logs -n "$ns" "$pod" -c runtime --previous --tail=5 2>&1 || true
  fi
done

echo "== 7. TLS on the pods: the pool's certificate names $server_name"
secret="modelplane-tls-$pool"
if [ -n "$ns" ] && kubectl get secret -n "$ns" "$secret" >/dev/null 2>&1; then
  crt=$(kubectl get secret -n "$ns" "$secret" -o jsonpath='{.data.tls\.crt}' | base64 -d)
  echo "$crt" | openssl x509 -noout -subject -enddate -ext subjectAltName
  if echo "$crt" | openssl x509 -noout -checkhost "$server_name" | grep -q "does match"; then
    echo "ok: the certificate names $server_name"
  else
    echo "FAIL: the certificate does not name $server_name: gateways will refuse the pods"
  fi
else
  echo "(no Secret $secret in $ns: the pool's pods serve plain HTTP)"
fi
if [ -n "${MP_GATEWAY_URL:-}" ] && [ -n "${MP_KEY:-}" ] && [ -n "${MP_ENDPOINT:-}" ] && [ -n "${MP_BODY:-}" ]; then
  code=$(curl -s -o /dev/stderr -w '%{http_code}' -H "Authorization: Bearer $MP_KEY" -H 'Content-Type: application/json' \
         -d "$MP_BODY" "$MP_GATEWAY_URL/v1/endpoints/$MP_ENDPOINT/predict" || true)
  case "$code" in
    2*) echo; echo "ok: the gateway's request was answered by a pod ($code)";;
    *) echo; echo "FAIL: the gateway answered $code (502: no pod answered; with TLS, its certificate did not verify)";;
  esac
fi
