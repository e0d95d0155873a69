package bus

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// StartEmbedded starts an in-process NATS server with JetStream, storing
// under dir, on a free loopback port, and waits until it takes connections.
// `modelplane dev` and the benchmarks run their NATS this way, so that one
// machine needs no NATS installed; the caller shuts it down. Call Ensure on
// it before use, as with any other server.
func StartEmbedded(dir string) (*server.Server, error) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("embedded nats did not start")
	}
	return ns, nil
}
