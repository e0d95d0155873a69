package process

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/coder/quartz"

	"modelplane/agent"
	"modelplane/busapi"
)

// TestReadLogTailAndFollow reads a replica's log as the control plane asks
// for it: the last lines, then what was written after, from the offset
// the last answer named; a log that was cut starts again at 0; no id may
// name a file outside the driver's logs; a previous run or another
// container is refused (agent.ErrLogUnsupported).
func TestReadLogTailAndFollow(t *testing.T) {
	t.Parallel()
	d := newDriver(t, t.TempDir(), quartz.NewMock(t), nil)
	var b strings.Builder
	for i := 1; i <= 500; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	if err := os.WriteFile(d.logPath("r-1"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := d.ReadLog(busapi.LogRequest{Replica: "r-1", Offset: -1, Tail: 3}, busapi.MaxLogChunk)
	if err != nil || c.Data != "line 498\nline 499\nline 500\n" || c.Next != int64(b.Len()) {
		t.Fatalf("tail 3 = %q next %d, %v; want the last three lines and the size", c.Data, c.Next, err)
	}
	f, _ := os.OpenFile(d.logPath("r-1"), os.O_APPEND|os.O_WRONLY, 0)
	_, _ = f.WriteString("after 1\npartial")
	f.Close()
	c, err = d.ReadLog(busapi.LogRequest{Replica: "r-1", Offset: c.Next, Tail: 0}, busapi.MaxLogChunk)
	if err != nil || c.Data != "after 1\npartial" {
		t.Fatalf("follow = %q, %v; want what was appended", c.Data, err)
	}
	if c, _ = d.ReadLog(busapi.LogRequest{Replica: "r-1", Offset: -1, Tail: 1}, busapi.MaxLogChunk); c.Data != "partial" {
		t.Errorf("tail 1 of a log ending mid-line = %q, want the unfinished line", c.Data)
	}
	if err := os.WriteFile(d.logPath("r-1"), []byte("new run\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, _ = d.ReadLog(busapi.LogRequest{Replica: "r-1", Offset: 1 << 20, Tail: 0}, busapi.MaxLogChunk); c.Data != "new run\n" || c.Offset != 0 {
		t.Errorf("after the log was cut: %q from %d, want it from 0", c.Data, c.Offset)
	}
	if c, _ = d.ReadLog(busapi.LogRequest{Replica: "r-1", Offset: 0, Tail: 0}, 4); c.Data != "new " || c.Next != 4 {
		t.Errorf("a chunk of 4 = %q next %d", c.Data, c.Next)
	}
	for _, bad := range []string{"../x", "", ".hidden", "a/b"} {
		if _, err := d.ReadLog(busapi.LogRequest{Replica: bad, Offset: -1, Tail: 10}, busapi.MaxLogChunk); err == nil {
			t.Errorf("ReadLog(%q) read something", bad)
		}
	}
	if _, err := d.ReadLog(busapi.LogRequest{Replica: "r-none", Offset: -1, Tail: 10}, busapi.MaxLogChunk); err == nil || !strings.Contains(err.Error(), "no log") {
		t.Errorf("missing log: %v", err)
	}
	// A node's replica has one log, every run appended: there is no
	// previous run or other container to read, and the answer says so.
	for _, req := range []busapi.LogRequest{{Replica: "r-1", Offset: -1, Tail: 10, Previous: true},
		{Replica: "r-1", Offset: -1, Tail: 10, Container: busapi.LogContainerFetch}} {
		if _, err := d.ReadLog(req, busapi.MaxLogChunk); !errors.Is(err, agent.ErrLogUnsupported) || !strings.Contains(err.Error(), "appended") {
			t.Errorf("ReadLog(%+v) = %v, want agent.ErrLogUnsupported saying every run is appended", req, err)
		}
	}
	if c, err := d.ReadLog(busapi.LogRequest{Replica: "r-1", Offset: 0, Container: busapi.LogContainerRuntime}, busapi.MaxLogChunk); err != nil || c.Data != "new run\n" {
		t.Errorf("the runtime container named = %q, %v; want its one log", c.Data, err)
	}
}
