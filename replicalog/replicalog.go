// Package replicalog reads a replica's log from the agent of its node, over
// an authorised NATS request (busapi.LogsSubject: only the control plane may
// ask, only that node's agent answers), for the people who may see the
// replica's endpoint: an engineer debugging a crash loop reads it from the
// portal or the API, never from a shell on the node.
//
// It reads; it keeps nothing. The endpoint is loaded through the
// team-scoped endpoint service, so another team's replica is not found.
package replicalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/endpoint"
	"modelplane/errdefs"
)

// ErrNodeSilent means the replica's node did not answer in time: its agent
// is down, unreachable or too old to serve logs.
var ErrNodeSilent = errors.New("the replica's node did not answer")

// ErrNoLog means the node answered that it has no log to show.
var ErrNoLog = errors.New("no log")

// timeout bounds one request to a node.
const timeout = 5 * time.Second

// Reader reads replicas' logs.
type Reader struct {
	nc  *nats.Conn
	eps *endpoint.Service
}

// New returns a Reader asking over nc.
func New(nc *nats.Conn, eps *endpoint.Service) *Reader { return &Reader{nc: nc, eps: eps} }

// Read returns replica's log as p may see it: its last tail lines when
// offset is negative, else the bytes from offset on (at most
// busapi.MaxLogChunk; follow with the chunk's Next).
func (r *Reader) Read(ctx context.Context, p *auth.Principal, endpointName, replica string, offset int64, tail int) (busapi.LogChunk, error) {
	reps, err := r.eps.Replicas(ctx, p, endpointName)
	if err != nil {
		return busapi.LogChunk{}, err
	}
	node := ""
	for _, rep := range reps {
		if rep.Name == replica {
			node = rep.Node
		}
	}
	if node == "" {
		return busapi.LogChunk{}, fmt.Errorf("replica %s of %s: %w", replica, endpointName, errdefs.ErrNotFound)
	}
	req, _ := json.Marshal(busapi.LogRequest{Replica: replica, Offset: offset, Tail: tail})
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err := r.nc.RequestWithContext(ctx, busapi.LogsSubject(node), req)
	if err != nil {
		return busapi.LogChunk{}, fmt.Errorf("%w: node %s: %v", ErrNodeSilent, node, err)
	}
	var c busapi.LogChunk
	if err := json.Unmarshal(m.Data, &c); err != nil {
		return busapi.LogChunk{}, fmt.Errorf("%w: node %s answered %v", ErrNodeSilent, node, err)
	}
	if c.Error != "" {
		return c, fmt.Errorf("%w: %s", ErrNoLog, c.Error)
	}
	return c, nil
}
