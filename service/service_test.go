package service_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coder/quartz"

	"modelplane/service"
)

func TestRunnerStartsStopsAndRestarts(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	runs := 0
	f := service.NewFunc(func(ctx context.Context) {
		mu.Lock()
		runs++
		mu.Unlock()
		<-ctx.Done()
	})
	f.Stop() // before any Start: nothing to do
	for range 2 {
		if err := f.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := f.Start(context.Background()); !errors.Is(err, service.ErrStarted) {
			t.Fatalf("second Start: got %v, want ErrStarted", err)
		}
		f.Stop()
		f.Stop()
	}
	if runs != 2 {
		t.Fatalf("runs: got %d, want 2", runs)
	}
}

func TestRunnerEndsWithItsContext(t *testing.T) {
	t.Parallel()
	ended := make(chan struct{})
	f := service.NewFunc(func(ctx context.Context) { <-ctx.Done(); close(ended) })
	ctx, cancel := context.WithCancel(context.Background())
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-ended
	f.Stop() // returns although the run already ended
}

func TestTickRunsAtOnceOnEveryTickAndOnWake(t *testing.T) {
	t.Parallel()
	clock := quartz.NewMock(t)
	trap := clock.Trap().NewTicker()
	defer trap.Close()
	rounds := make(chan struct{})
	wake := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		service.Tick(ctx, clock, time.Minute, wake, func(context.Context) { rounds <- struct{}{} })
	}()
	call := trap.MustWait(ctx)
	call.MustRelease(ctx)
	<-rounds // at once
	clock.Advance(time.Minute).MustWait(ctx)
	<-rounds // on the tick
	wake <- struct{}{}
	<-rounds // on a wake, without time passing
	cancel()
	<-done
}

type recorder struct {
	name string
	log  *[]string
	fail bool
}

func (r recorder) Start(context.Context) error {
	if r.fail {
		return errors.New("refused")
	}
	*r.log = append(*r.log, "start "+r.name)
	return nil
}

func (r recorder) Stop() { *r.log = append(*r.log, "stop "+r.name) }

func TestGroupStartsInOrderAndStopsInReverse(t *testing.T) {
	t.Parallel()
	var log []string
	g := service.NewGroup(recorder{"a", &log, false}, recorder{"b", &log, false})
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.Stop()
	want := []string{"start a", "start b", "stop b", "stop a"}
	if !slices.Equal(log, want) {
		t.Fatalf("got %v, want %v", log, want)
	}
}

func TestGroupUndoesAFailedStart(t *testing.T) {
	t.Parallel()
	var log []string
	g := service.NewGroup(recorder{"a", &log, false}, recorder{"b", &log, true}, recorder{"c", &log, false})
	if err := g.Start(context.Background()); err == nil {
		t.Fatal("Start succeeded although b refused")
	}
	want := []string{"start a", "stop a"}
	if !slices.Equal(log, want) {
		t.Fatalf("got %v, want %v", log, want)
	}
}
