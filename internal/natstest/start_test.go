package natstest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A server that cannot start JetStream fails the start with the reason
// its log gives.
func TestStartReportsJetStreamThatDidNotStart(t *testing.T) {
	o := options(t)
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	o.StoreDir = file
	s, _, err := start(&o, time.Second) // it never becomes ready
	if err == nil {
		s.Shutdown()
		t.Fatal("start with a file as the store directory succeeded")
	}
	if !strings.Contains(err.Error(), "Can't start JetStream: storage directory is not a directory") {
		t.Fatalf("start: %v; want JetStream's failure and its reason", err)
	}
}

func TestStartServesJetStream(t *testing.T) {
	if s := New(t); !s.JetStreamEnabled() {
		t.Fatal("New: JetStream not enabled")
	}
}
