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

// ErrUnsupported means the request asked for a log the replica's node
// does not keep: a previous run or another container of a node's replica,
// which has one log (busapi.LogChunk.Unsupported).
var ErrUnsupported = errors.New("log not kept")

// timeout bounds one request to a node.
const timeout = 5 * time.Second

// Reader reads replicas' logs.
type Reader struct {
	nc  *nats.Conn
	eps *endpoint.Service
}

// New returns a Reader asking over nc.
func New(nc *nats.Conn, eps *endpoint.Service) *Reader { return &Reader{nc: nc, eps: eps} }

// Read returns replica req.Replica's log as p may see it: its last
// req.Tail lines when req.Offset is negative, else the bytes from
// req.Offset on (at most busapi.MaxLogChunk; follow with the chunk's
// Next), of the run and container req names.
func (r *Reader) Read(ctx context.Context, p *auth.Principal, endpointName string, req busapi.LogRequest) (busapi.LogChunk, error) {
	replica := req.Replica
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
	data, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err := r.nc.RequestWithContext(ctx, busapi.LogsSubject(node), data)
	if err != nil {
		return busapi.LogChunk{}, fmt.Errorf("%w: node %s: %v", ErrNodeSilent, node, err)
	}
	var c busapi.LogChunk
	if err := json.Unmarshal(m.Data, &c); err != nil {
		return busapi.LogChunk{}, fmt.Errorf("%w: node %s answered %v", ErrNodeSilent, node, err)
	}
	if c.Error != "" && c.Unsupported {
		return c, fmt.Errorf("%w: %s", ErrUnsupported, c.Error)
	}
	if c.Error != "" {
		return c, fmt.Errorf("%w: %s", ErrNoLog, c.Error)
	}
	return c, nil
}
