package ingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/busapi"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
)

// TestAgentCutOffAndKilled runs agents that spool every batch on disk until
// JetStream acknowledges it. Their network first loses the acks (publishes
// still arrive and are stored), then goes away entirely while they keep
// producing seconds; then they are killed. Restarted after the duplicate
// window has passed, they replay the spool with the original ids: batches
// the stream already held come in a second time, and ClickHouse must still
// hold each row once. Each phase ends on what it is about, not after a
// time: every batch acknowledged, every batch stored with its ack lost.
func TestAgentCutOffAndKilled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, time.Second)
	u := e.start(t, e.usageConfig(t, e.js))
	p := newProxy(t, e.url)
	const agents = 3
	spools := make([]*spoolAgent, agents)
	for i := range spools {
		spools[i] = newSpoolAgent(t, e.l, fmt.Sprintf("edge-%d", i), p.url())
	}
	tick := func(sec int64) {
		for _, a := range spools {
			a.publish(nodeSecond(a.node, sec, 8))
		}
	}
	spooledNow := func() (n int) {
		for _, a := range spools {
			n += a.spooled()
		}
		return n
	}
	sec := int64(0)
	for ; sec < 50; sec++ { // connected
		tick(sec)
	}
	wait.Eventually(t, 30*time.Second, func() bool { return spooledNow() == 0 }, "connected: %v batches never acknowledged", wait.Show(func() any { return spooledNow() }))
	p.dropReplies()
	for ; sec < 80; sec++ { // acks lost on the way back
		tick(sec)
	}
	wait.Eventually(t, 30*time.Second, func() bool { return streamMsgs(t, e) == agents*80 },
		"acks lost: the stream holds %v batches, want every one published", wait.Show(func() any { return streamMsgs(t, e) }))
	p.cut()
	for ; sec < 120; sec++ { // cut off
		tick(sec)
	}
	spooled := 0
	for _, a := range spools {
		spooled += a.kill()
	}
	before := streamMsgs(t, e)
	for i, a := range spools {
		spools[i] = newSpoolAgent(t, e.l, a.node, e.url) // the network is back
		if err := spools[i].replay(a.dir); err != nil {
			t.Fatal(err)
		}
	}
	e.waitDrained(t, "", 30*time.Second)
	after := streamMsgs(t, e)
	st := u.Stats()
	t.Logf("%d batches spooled and replayed; stream grew %d → %d; %d batches skipped as already stored", spooled, before, after, st.DuplicateBatches)
	if spooled == 0 || after-before != uint64(spooled) {
		t.Errorf("replayed %d batches, stream grew by %d: want every spooled batch replayed", spooled, after-before)
	}
	if st.DuplicateBatches == 0 {
		t.Error("no replayed batch was already stored; the acks were not lost as the test intends")
	}
	e.l.check(t, e.ch)
}

// spoolAgent is the publishing side of a node agent: a batch is written to
// the spool directory before it is published and removed once JetStream
// acknowledges it.
type spoolAgent struct {
	t    *testing.T
	l    *ledger
	node string
	dir  string
	nc   *nats.Conn
	js   jetstream.JetStream
	dead chan struct{} // closed when killed
	wg   sync.WaitGroup
}

func newSpoolAgent(t *testing.T, l *ledger, node, url string) *spoolAgent {
	t.Helper()
	nc, err := nats.Connect(url, append(natstest.ControlPlane(t), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &spoolAgent{t: t, l: l, node: node, dir: t.TempDir(), nc: nc, js: js, dead: make(chan struct{})}
}

func (a *spoolAgent) publish(b busapi.UsageBatch) {
	data, err := json.Marshal(b)
	if err != nil {
		a.t.Fatal(err)
	}
	file := filepath.Join(a.dir, b.ID+".json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		a.t.Fatal(err)
	}
	a.l.attempt(b)
	f, err := a.js.PublishAsync(busapi.UsageSubject(b.Node), data, jetstream.WithMsgID(b.ID))
	if err != nil {
		return // stays in the spool
	}
	a.wg.Go(func() {
		// Futures pending when the connection closes never resolve.
		select {
		case <-f.Ok():
			select {
			case <-a.dead:
				return
			default:
			}
			a.l.ack(b)
			os.Remove(file)
		case <-f.Err():
		case <-a.dead:
		}
	})
}

// spooled is the number of batches in the agent's spool.
func (a *spoolAgent) spooled() int {
	files, _ := filepath.Glob(filepath.Join(a.dir, "*.json"))
	return len(files)
}

// kill ends the agent as a crash would: the connection and whatever it had
// buffered are gone, the spool stays. It returns the batches spooled.
func (a *spoolAgent) kill() int {
	close(a.dead)
	a.nc.Close()
	a.wg.Wait()
	files, _ := filepath.Glob(filepath.Join(a.dir, "*.json"))
	return len(files)
}

// replay publishes every batch in dir with its original id and removes it
// once acknowledged. A batch the stream took before the agent was killed
// may still be inside the duplicate window, which runs on the NATS
// server's clock: such a publish is dropped as a duplicate and changes
// nothing, so it is tried again until the window has forgotten the id and
// the batch is stored a second time, as a late replay is.
func (a *spoolAgent) replay(dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return err
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		var b busapi.UsageBatch
		if err := json.Unmarshal(data, &b); err != nil {
			return err
		}
		var ack *jetstream.PubAck
		wait.Eventually(a.t, 10*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ack, err = a.js.Publish(ctx, busapi.UsageSubject(b.Node), data, jetstream.WithMsgID(b.ID))
			return err != nil || !ack.Duplicate
		}, "replay of %s still a duplicate: the window never forgot it", b.ID)
		if err != nil {
			return fmt.Errorf("replay %s: %w", b.ID, err)
		}
		a.l.ack(b)
		if err := os.Remove(file); err != nil {
			return err
		}
	}
	return nil
}

// proxy stands between agents and NATS so that the test can break the
// network: first only the server's replies (publish acks) are lost, then
// every connection is cut and new ones refused.
type proxy struct {
	ln      net.Listener
	target  string
	drop    atomic.Bool
	mu      sync.Mutex
	conns   []net.Conn
	stopped bool
}

func newProxy(t *testing.T, natsURL string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: strings.TrimPrefix(natsURL, "nats://")}
	t.Cleanup(p.cut)
	go p.serve()
	return p
}

func (p *proxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.stopped {
			p.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go io.Copy(s, c)
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 && !p.drop.Load() {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

func (p *proxy) dropReplies() { p.drop.Store(true) }

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
