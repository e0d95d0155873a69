// Package cluster is the agent's kubernetes driver: it runs the replicas
// of a pool, a Kubernetes cluster with the NVIDIA GPU operator, as pods
// (agent.Driver, agent.PoolDriver, agent.InventorySource, agent.QuotaSetter,
// agent.DesiredSetter). DESIGN.md section 22; docs/kubernetes.md, "The
// cluster agent".
//
// It owns:
//   - the pool's inventory read from the nodes (ReadInventory) and
//     followed by a watch of them (PoolInventory, agent.InventorySource):
//     a node added, cordoned, NotReady, removed or relaid out counts at
//     the agent's next heartbeat; whole
//     GPUs and MIG slices from allocatable nvidia.com/gpu and
//     nvidia.com/mig-<profile>, typed from the operator's product and
//     memory labels, or the cores and memory of the nodes without GPUs.
//     modelplane places counts and profiles in it; the scheduler places
//     pods, so slot numbers are bookkeeping, never devices, and each GPU
//     keeps its index while its node stays (Config.IndexFile across
//     restarts);
//   - every object it writes, by server-side apply with one field manager
//     per pool and only where the live object's managed fields differ
//     (a pass with nothing changed makes no write): per team a namespace,
//     a ResourceQuota from the team's quota, a tokenless ServiceAccount,
//     the pool's artifact Secret and, with PodTLS, its certificate Secret
//     (tls.go), which the serving container mounts; per endpoint version a NetworkPolicy
//     that admits only gateways (and the agent) and owns the version's
//     pods; per replica a token Secret and a pod with the fetch init
//     container (`modelplane fetch`), the catalogue entry's runtime
//     container, requests and limits, node affinity and probes;
//   - watches of those objects by label, which wake a resync so a hand
//     edit is put back at once, and a resync every Config.Resync;
//   - once the agent has set the desired replicas (SetDesired), the
//     sweep at every resync of the pods, token Secrets and
//     NetworkPolicies of the pool that no desired or running replica
//     owns (sweep.go), and the take-over by Start of a live pod made for
//     a desired replica's spec whose record the agent lost;
//   - mapping pod status to observations: Ready, the scheduler's
//     Unschedulable, failing container states with their reasons, and a
//     deleted or ended pod as gone (agent.ErrNotRunning), which the agent
//     replaces with a new pod.
//
// It decides nothing the agent decides: which replicas run comes from the
// desired state, and only Start creates a pod. It must not import the
// database or any control-plane package: the agent works with the
// control plane down, and pods keep serving with the agent down.
package cluster
