package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"modelplane/busapi"
	"modelplane/internal/wait"
)

// checkLedger asserts what exactly-once needs of the stream: every message
// id is its batch id, no id is stored twice, every batch holds one second
// of this node, and the seconds from the first to the last have no gap.
// It returns the stored ids.
func checkLedger(t *testing.T, msgs []usageMsg, node string, perSecond int) map[string]busapi.UsageBatch {
	t.Helper()
	byID := make(map[string]busapi.UsageBatch)
	var secs []int64
	for _, m := range msgs {
		b := m.batch
		if m.msgID != b.ID {
			t.Fatalf("Nats-Msg-Id %q carries batch %q", m.msgID, b.ID)
		}
		if _, dup := byID[b.ID]; dup {
			t.Fatalf("batch %s stored twice", b.ID)
		}
		byID[b.ID] = b
		if b.Node != node || len(b.Records) == 0 {
			t.Fatalf("batch %s: node %q, %d records", b.ID, b.Node, len(b.Records))
		}
		sec := b.Records[0].Time
		if want := BatchID(node, sec, 0); b.ID != want {
			t.Fatalf("batch id %q, want %q", b.ID, want)
		}
		if perSecond > 0 && len(b.Records) != perSecond {
			t.Fatalf("batch %s has %d records, want one per allocated slot: %d", b.ID, len(b.Records), perSecond)
		}
		for _, r := range b.Records {
			if r.Time != sec || r.Node != node {
				t.Fatalf("batch %s mixes seconds or nodes: %+v", b.ID, r)
			}
		}
		secs = append(secs, sec)
	}
	slices.Sort(secs)
	for i := 1; i < len(secs); i++ {
		if secs[i] != secs[i-1]+1 {
			t.Fatalf("seconds %d to %d missing from the stream", secs[i-1]+1, secs[i]-1)
		}
	}
	return byID
}

func TestMeteringOneRecordPerSlotPerSecond(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig(t, "node-meter", nil)
	cfg.GPUs = inventory(t, "2xA100-80GB,1xH100-80GB", "2:3g.40gb+4g.40gb")
	tp := classifier("tp", 0)
	tp.Slots = []busapi.Slot{{GPU: 0}, {GPU: 1}} // tensor parallel over two whole GPUs
	mig := classifier("mig", 0)
	mig.Team, mig.Endpoint, mig.Version = "risk", "risk-score", "v2"
	mig.GPUType, mig.Profile, mig.Slots = "H100-80GB", "mig-3g.40gb", []busapi.Slot{{GPU: 2, Slice: 0}}
	e.put(t, "node-meter", 1, tp, mig)
	a := start(t, cfg, e.nc)
	addrs := allReady(t, a, "tp", "mig")
	for range 5 {
		predict(t, addrs["tp"])
	}

	var stored map[string]busapi.UsageBatch
	var requests int64
	wait.Eventually(t, 10*time.Second, func() bool {
		msgs := readUsage(t, e.js)
		stored = checkLedger(t, msgs, "node-meter", 3)
		requests = 0
		for _, b := range stored {
			for _, r := range b.Records {
				requests += r.Requests
			}
		}
		return requests == 5 && len(stored) >= 3
	}, "%v requests metered; want 5 requests in at least 3 batches", wait.Show(func() any { return fmt.Sprintf("%d batches, %d", len(stored), requests) }))
	for _, b := range stored {
		for _, r := range b.Records {
			var want busapi.Usage
			switch {
			case r.Replica == "tp" && r.GPU == 0:
				want = busapi.Usage{GPU: 0, GPUType: "A100-80GB", Profile: "full", Team: "fraud", Endpoint: "fraud-detector", Model: "fraud-xgb", Version: "v23", MemoryMB: 24576}
			case r.Replica == "tp" && r.GPU == 1:
				want = busapi.Usage{GPU: 1, GPUType: "A100-80GB", Profile: "full", Team: "fraud", Endpoint: "fraud-detector", Model: "fraud-xgb", Version: "v23", MemoryMB: 24576}
				if r.Requests != 0 {
					t.Errorf("second slot of a tensor-parallel replica carries %d requests; the first slot counts them", r.Requests)
				}
			case r.Replica == "mig":
				want = busapi.Usage{GPU: 2, GPUType: "H100-80GB", Profile: "mig-3g.40gb", Team: "risk", Endpoint: "risk-score", Model: "fraud-xgb", Version: "v2", MemoryMB: 12288}
				if r.UtilPct != 0 || r.Requests != 0 {
					t.Errorf("idle slot: util %v, requests %d; want 0 and 0", r.UtilPct, r.Requests)
				}
			default:
				t.Fatalf("unexpected record %+v", r)
			}
			if r.GPU != want.GPU || r.Slice != 0 || r.GPUType != want.GPUType || r.Profile != want.Profile || r.Team != want.Team ||
				r.Endpoint != want.Endpoint || r.Model != want.Model || r.Version != want.Version || r.MemoryMB != want.MemoryMB {
				t.Errorf("record %+v, want fields of %+v", r, want)
			}
			if r.UtilPct < 0 || r.UtilPct > 100 {
				t.Errorf("util %v out of 0–100", r.UtilPct)
			}
		}
	}
}

func TestBatchIDsAreDeterministicAndChunked(t *testing.T) {
	t.Parallel()
	if got := BatchID("gpu-node-07", 1764504000, 2); got != "gpu-node-07/1764504000/2" {
		t.Fatalf("BatchID = %q", got)
	}
	// Two agents metering the same second of the same allocations build
	// byte-identical batches, so the second copy deduplicates.
	build := func() [][]byte {
		e := &Agent{cfg: Config{Node: "n", BatchRecords: 2, GPUs: inventory(t, "A100-80GB", "0:7x1g.10gb")}, log: testLog(t)}
		e.cfg.defaults()
		dir := t.TempDir()
		sp, err := openSpool(dir, DefaultSpoolMaxBytes)
		if err != nil {
			t.Fatal(err)
		}
		e.spool = sp
		var recs []busapi.Usage
		for i := range 5 {
			recs = append(recs, busapi.Usage{Time: 100, Node: "n", GPU: 0, Slice: i, GPUType: "A100-80GB", Profile: "mig-1g.10gb", Replica: "r" + strconv.Itoa(i)})
		}
		e.spoolBatches(100, recs, false)
		var out [][]byte
		for _, en := range sp.entries {
			data, _, err := sp.read(en)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, data)
		}
		return out
	}
	a, b := build(), build()
	if len(a) != 3 {
		t.Fatalf("5 records in batches of 2 made %d batches, want 3", len(a))
	}
	for i := range a {
		if string(a[i]) != string(b[i]) {
			t.Fatalf("batch %d differs between two builds", i)
		}
		batch, err := busapi.DecodeUsage(a[i])
		if err != nil {
			t.Fatal(err)
		}
		if want := BatchID("n", 100, i); batch.ID != want {
			t.Errorf("chunk %d id %q, want %q", i, batch.ID, want)
		}
	}
}

func TestMeteringSpoolsDuringOutageAndReplaysWithSameIDs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig(t, "node-spool", nil)
	e.put(t, "node-spool", 1, classifier("s1", 0))
	a := start(t, cfg, e.nc)
	allReady(t, a, "s1")
	wait.Eventually(t, 10*time.Second, func() bool { return len(readUsage(t, e.js)) >= 1 }, "no usage batch stored")

	e.srv.Shutdown()
	var waiting []string
	// A batch's file appears before the spool counts it.
	wait.Eventually(t, 10*time.Second, func() bool {
		waiting = spooledIDs(t, cfg.StateDir)
		return len(waiting) >= 3 && a.Counters().SpoolBatches >= 3
	}, "%v batches in the spool, want 3", wait.Show(func() any { return len(waiting) }))
	if c := a.Counters(); c.BatchesDropped != 0 || c.SpoolBatches < 3 {
		t.Fatalf("during the outage: %+v", c)
	}

	e.srv.Restart()
	wait.Eventually(t, 15*time.Second, func() bool { return a.Counters().SpoolBatches == 0 },
		"%v batches still spooled", wait.Show(func() any { return a.Counters().SpoolBatches }))
	a.Stop()
	c := a.Counters()
	stored := checkLedger(t, readUsage(t, e.js), "node-spool", 1)
	for _, id := range waiting {
		if _, ok := stored[id]; !ok {
			t.Errorf("spooled batch %s never reached the stream", id)
		}
	}
	// Every batch made is stored once, still waits, or was acked as a copy
	// of a stored one (its first ack was lost with the connection).
	if got, want := uint64(len(stored))+uint64(c.SpoolBatches)+c.BatchesDuplicate, c.UsageBatches; got != want {
		t.Fatalf("stored %d + spooled %d + duplicates %d batches, made %d: lost or duplicated", len(stored), c.SpoolBatches, c.BatchesDuplicate, want)
	}
	if c.BatchesDropped != 0 || c.RecordsDropped != 0 {
		t.Fatalf("dropped: %+v", c)
	}
}

func TestAgentKilledDuringOutageReplaysItsSpoolAfterRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	drv := newCountingDriver(t)
	cfg := testConfig(t, "node-kill", drv)
	e.put(t, "node-kill", 1, classifier("k1", 0))
	first := start(t, cfg, e.nc)
	allReady(t, first, "k1")
	wait.Eventually(t, 10*time.Second, func() bool { return len(readUsage(t, e.js)) >= 1 }, "no usage batch stored")

	e.srv.Shutdown()
	wait.Eventually(t, 10*time.Second, func() bool { return len(spooledIDs(t, cfg.StateDir)) >= 2 },
		"%v batches in the spool, want 2", wait.Show(func() any { return len(spooledIDs(t, cfg.StateDir)) }))
	// The agent dies mid-outage: nothing is flushed, the loops just end.
	first.Stop()
	waiting := spooledIDs(t, cfg.StateDir)
	c1 := first.Counters()
	for _, name := range mustReadDir(t, filepath.Join(cfg.StateDir, "spool")) {
		if strings.HasPrefix(name, ".tmp-") {
			t.Fatalf("half-written spool file %s left behind", name)
		}
	}

	e.srv.Restart()
	second := start(t, cfg, e.nc)
	var why error
	wait.Eventually(t, 15*time.Second, func() bool {
		msgs, err := tryReadUsage(e.js)
		if err != nil {
			why = err
			return false
		}
		stored := checkLedger(t, msgs, "node-kill", 1)
		for _, id := range waiting {
			if _, ok := stored[id]; !ok {
				why = fmt.Errorf("spooled batch %s not replayed yet", id)
				return false
			}
		}
		if c := second.Counters(); c.SpoolBatches != 0 {
			why = fmt.Errorf("%d batches still spooled", c.SpoolBatches)
			return false
		}
		return true
	}, "spool not replayed: %v", wait.Show(func() any { return why }))
	second.Stop()
	stored := readUsage(t, e.js)
	ledger := checkLedger(t, stored, "node-kill", 0)
	// Both runs' batches are stored once each; a copy (a replay whose
	// first ack was lost, or a second both runs metered) is acked as a
	// duplicate and not stored again.
	c2 := second.Counters()
	if got, want := uint64(len(ledger))+uint64(c2.SpoolBatches)+c1.BatchesDuplicate+c2.BatchesDuplicate, c1.UsageBatches+c2.UsageBatches; got != want {
		t.Fatalf("stored %d + spooled %d + duplicates %d batches, the two runs made %d", len(ledger), c2.SpoolBatches, c1.BatchesDuplicate+c2.BatchesDuplicate, want)
	}
	if c := second.Counters(); c.ReplicaAdoptions != 1 || drv.starts.Load() != 1 {
		t.Fatalf("the restarted agent must adopt its replica: %+v, %d starts", c, drv.starts.Load())
	}
}

func TestSpoolSurvivesReopenAndBoundsItsSize(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sp, err := openSpool(dir, 150)
	if err != nil {
		t.Fatal(err)
	}
	// The first and last as an agent before the binary form spooled them.
	for i := range 3 {
		id := BatchID("n", int64(i), 0)
		data := []byte(`{"id":"` + id + `","node":"n","records":[]}`)
		if i == 1 {
			data = busapi.AppendUsageBatch(nil, &busapi.UsageBatch{ID: id, Node: "n"})
		}
		if err := sp.append(id, data, i == 0); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if err := sp.append("x", make([]byte, 150-sp.size.Load()+1), false); err != errSpoolFull {
		t.Fatalf("append past the bound: %v, want errSpoolFull", err)
	}
	// A crash mid-write leaves a temporary file; reopening clears it and
	// finds the batches in order with their ids.
	if err := os.WriteFile(filepath.Join(dir, ".tmp-00000000000000000009"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	again, err := openSpool(dir, 200)
	if err != nil {
		t.Fatal(err)
	}
	if again.len() != 3 || again.size.Load() != sp.size.Load() {
		t.Fatalf("reopened: %d batches, %d bytes; want 3, %d", again.len(), again.size.Load(), sp.size.Load())
	}
	for i, en := range again.head(10) {
		_, id, err := again.read(en)
		if err != nil || id != BatchID("n", int64(i), 0) {
			t.Fatalf("entry %d: %q, %v", i, id, err)
		}
	}
	if err := again.append("n/3/0", []byte(`{"id":"n/3/0"}`), true); err != nil {
		t.Fatal(err)
	}
	if e := again.head(10); e[len(e)-1].seq <= e[len(e)-2].seq {
		t.Fatal("a batch appended after reopening must come last")
	}
	if names := mustReadDir(t, dir); slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, ".tmp-") }) {
		t.Fatalf("temporary files left: %v", names)
	}
}

func mustReadDir(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}
