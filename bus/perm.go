package bus

import (
	"modelplane/busapi"
)

// Permissions are the subjects one NATS user may publish to and subscribe
// to; anything not listed is refused by the server. Inbox is the prefix of
// the user's reply subjects (nats.CustomInboxPrefix): requests, JetStream
// publish acks and KV watch deliveries come back under it, and no other user
// may subscribe there. An empty Publish and Subscribe mean everything (the
// control plane).
type Permissions struct {
	Publish   []string
	Subscribe []string
	Inbox     string
	// Respond lets the user answer the requests it receives on the
	// subjects it may subscribe to (one reply each, within a minute),
	// whatever the asker's inbox.
	Respond bool
}

// ControlPlanePermissions are the control plane's: everything. It writes
// every bucket, consumes every stream and answers every heartbeat; it is the
// party the others trust, so restricting it would only list all subjects.
func ControlPlanePermissions() Permissions {
	return Permissions{Inbox: "_INBOX"}
}

// GatewayPermissions are a gateway's: it reads the routing table, the API
// key digests and the identity entries (watching whole buckets), and
// publishes request statistics, prediction samples and wake requests. The
// one bucket it writes is mp_grant_quota, the daily quota counters of
// grants, which it reads and updates key by key (compare-and-set); it reads
// no node's desired state or heartbeats.
func GatewayPermissions(name string) Permissions {
	inbox := GatewayInbox(name)
	p := Permissions{
		Publish: []string{
			busapi.ReqStatsSubject(">"),
			busapi.PredictionSubject(">"),
			busapi.WakeSubject(">"),
		},
		Subscribe: []string{inbox + ".>"},
		Inbox:     inbox,
	}
	for _, b := range []string{busapi.BucketRoutes, busapi.BucketKeys, busapi.BucketIdentity} {
		p.Publish = append(p.Publish, watchAPI(b, busapi.KVSubject(b, ">"))...)
	}
	q := "KV_" + busapi.BucketGrantQuota
	p.Publish = append(p.Publish, "$JS.API.STREAM.INFO."+q, "$JS.API.DIRECT.GET."+q+".>", "$JS.API.STREAM.MSG.GET."+q,
		busapi.KVSubject(busapi.BucketGrantQuota, ">"))
	return p
}

// AgentPermissions are the agent's of node: it watches only its own key in
// mp_desired, publishes only its own heartbeats and usage, and answers the
// control plane's requests for its replicas' logs. The consumer
// it may create is filtered to its key in the request subject, and the
// server refuses a request whose body asks for another filter.
func AgentPermissions(node string) Permissions {
	inbox := AgentInbox(node)
	p := Permissions{
		Publish: []string{
			busapi.NodeStatusSubject(node),
			busapi.UsageSubject(node),
		},
		Subscribe: []string{inbox + ".>", busapi.LogsSubject(node)},
		Inbox:     inbox,
		Respond:   true,
	}
	p.Publish = append(p.Publish, watchAPI(busapi.BucketDesired, busapi.KVSubject(busapi.BucketDesired, node))...)
	return p
}

// watchAPI are the JetStream API subjects a KV watch of filter in bucket
// publishes to: the bucket's stream info (nats.go looks the bucket up
// first), the creation of its ordered consumer with that filter (the
// subject form that names the filter, so the permission is the filter), and
// the deletion of the consumer it replaces when the watch resets (it names
// the consumer, whose random name only its creator learns: no client but
// the control plane may list consumers), and the flow-control replies of
// its deliveries.
func watchAPI(bucket, filter string) []string {
	stream := "KV_" + bucket
	return []string{
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.CONSUMER.CREATE." + stream + ".*." + filter,
		"$JS.API.CONSUMER.DELETE." + stream + ".*",
		"$JS.FC." + stream + ".>",
	}
}

// AgentInbox is the reply prefix of node's agent.
func AgentInbox(node string) string { return "_INBOX_node_" + node }

// GatewayInbox is the reply prefix of the gateway credential name.
func GatewayInbox(name string) string { return "_INBOX_gateway_" + name }
