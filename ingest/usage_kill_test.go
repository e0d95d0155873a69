package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"modelplane/ingest"
	"modelplane/internal/natstest"
	"modelplane/internal/wait"
)

var errKilled = errors.New("consumer killed")

// TestKilledBetweenInsertAndAck kills the consumer over and over while
// agents publish: at random moments, and right after ClickHouse accepted an
// insert but before any ack went out. A kill drops the consumer's NATS
// connection and acks nothing more; its messages come back after AckWait to
// the next consumer, which must skip every row the dead one stored. Half of
// the consumers under load wait for their kill after an insert rather than
// a random moment, so a loaded machine cannot turn every kill into one
// before the first insert.
func TestKilledBetweenInsertAndAck(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, 0)
	stop := make(chan struct{})
	// 30 nodes of 8 GPUs, a second of theirs every 50 ms: 7,200 rows/s.
	done := e.publishLoad(e.js, 30, 8, 50*time.Millisecond, stop)
	var total ingest.UsageStats
	add := func(s ingest.UsageStats) {
		total.Rows += s.Rows
		total.DuplicateRows += s.DuplicateRows
	}
	const kills = 30
	var afterInsert int
	for i := range kills {
		nc, err := nats.Connect(e.url, natstest.ControlPlane(t)...)
		if err != nil {
			t.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		var dead atomic.Bool
		killed := make(chan struct{}, 1)
		cfg := e.usageConfig(t, js)
		cfg.AckWait = time.Second
		cfg.AfterInsert = func([]string) error {
			// A dead process acks nothing, from any worker.
			if dead.Load() {
				return errKilled
			}
			if rand.IntN(3) == 0 {
				dead.Store(true)
				select {
				case killed <- struct{}{}:
				default:
				}
				return errKilled
			}
			return nil
		}
		u, err := ingest.NewUsage(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := u.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 && i < kills/2 {
			// While agents publish, every other consumer lives until it
			// dies right after an insert (a third of its inserts end
			// it), so the run kills after inserts however slow the
			// machine is; the bound only stops a consumer that never
			// inserts.
			wait.Eventually(t, time.Minute, func() bool {
				select {
				case <-killed:
					return true
				default:
					return false
				}
			}, "the consumer inserted nothing while agents published: %v", wait.Show(func() any {
				// Which of fetch, lookup and insert failed, if any; an
				// agent that stopped publishing shows as no rows at all.
				return fmt.Sprintf("consumer %+v, rows attempted %d", u.Stats(), e.l.rows())
			}))
			afterInsert++
		} else {
			select {
			case <-killed:
				afterInsert++
			case <-time.After(time.Duration(50+rand.IntN(400)) * time.Millisecond):
				dead.Store(true)
			}
		}
		nc.Close()
		u.Stop()
		add(u.Stats())
		if i == kills/2 {
			close(stop)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	}
	u := e.start(t, e.usageConfig(t, e.js))
	e.waitDrained(t, "", 60*time.Second)
	add(u.Stats())
	t.Logf("%d kills (%d right after an insert); %d rows inserted, %d skipped as already stored", kills, afterInsert, total.Rows, total.DuplicateRows)
	if afterInsert == 0 || total.DuplicateRows == 0 {
		t.Errorf("kills after insert %d, duplicate rows skipped %d: the test did not exercise redelivery of stored rows", afterInsert, total.DuplicateRows)
	}
	e.l.check(t, e.ch)
}
