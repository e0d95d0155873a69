package fleet_test

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"modelplane/busapi"
	"modelplane/db"
	"modelplane/fleet"
	"modelplane/trust"
)

// auditCount is how many audit rows of action name node.
func (f *fixture) auditCount(t *testing.T, action, node string) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(t.Context(), "SELECT count(*) FROM audit_log WHERE action = $1 AND object_name = $2", action, node).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestNodeClaimingMoreThanItsAttestationIsRefused reproduces issue 25
// point 3: a node attested as 8 whole A100s whose heartbeat claims 64
// H100s (to attract every team's H100 versions, their artifacts and
// traffic, and have its seconds priced as H100) is refused: nothing of the
// heartbeat is recorded, no replica is placed on it, the refusal is counted
// at every heartbeat and raised once as a platform event (audit). A
// heartbeat within the attestation is recorded; one claiming a ninth GPU,
// another MIG layout or a CPU inventory is refused again.
func TestNodeClaimingMoreThanItsAttestationIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	reg := prometheus.NewRegistry()
	if err := f.fleet.Register(reg); err != nil {
		t.Fatal(err)
	}
	att := trust.NewAttestations(f.pool, f.clock)
	whole := []string{busapi.ProfileFull}
	if err := att.Attest(t.Context(), f.eng, "node-a", trust.Inventory{GPUs: []trust.GPUs{{Type: "A100-80GB", Count: 8, Slices: whole}}}); err == nil {
		t.Fatal("a team engineer attested a node's inventory")
	}
	if err := att.Attest(t.Context(), f.root, "node-a", trust.Inventory{GPUs: []trust.GPUs{{Type: "A100-80GB", Count: 8, Slices: whole}}}); err != nil {
		t.Fatal(err)
	}
	f.endpoint(t, "chat-ep", "chat", "c1", "gpu-h100-80gb", "critical", 1)

	observe := func(inv []busapi.GPU) error {
		_, err := f.fleet.Observe(t.Context(), busapi.NodeStatus{Node: "node-a", BootID: "b1", LeaseSeconds: 15, GPUs: inv})
		return err
	}
	for range 2 {
		if err := observe(gpus(0, 64, "H100-80GB", nil)); !errors.Is(err, trust.ErrOverAttestation) {
			t.Fatalf("64 × H100 from a node attested 8 × A100: err %v, want ErrOverAttestation", err)
		}
	}
	if _, err := db.New(f.pool).NodeGet(t.Context(), "node-a"); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("the refused heartbeat registered the node (err %v)", err)
	}
	if p := f.reconcile(t); p.Placed != 0 {
		t.Fatalf("pass placed %d replicas on claimed H100s, want none", p.Placed)
	}
	if got := counter(t, reg, "modelplane_fleet_heartbeats_dropped_total", trust.DropOverAttestation); got != 2 {
		t.Errorf("refused heartbeats counted %v, want 2", got)
	}
	if n := f.auditCount(t, trust.AuditRefused, "node-a"); n != 1 {
		t.Errorf("refusal raised %d times, want once for two refused heartbeats", n)
	}

	if err := observe(gpus(0, 8, "A100-80GB", nil)); err != nil {
		t.Fatalf("the attested inventory was refused: %v", err)
	}
	if err := observe(gpus(0, 7, "A100-80GB", nil)); err != nil {
		t.Fatalf("fewer GPUs than attested (one failed) was refused: %v", err)
	}
	for name, inv := range map[string][]busapi.GPU{
		"a ninth GPU":        gpus(0, 9, "A100-80GB", nil),
		"another MIG layout": gpus(0, 1, "A100-80GB", seven1g()),
	} {
		if err := observe(inv); !errors.Is(err, trust.ErrOverAttestation) {
			t.Errorf("%s: err %v, want ErrOverAttestation", name, err)
		}
	}
	if _, err := f.fleet.Observe(t.Context(), busapi.NodeStatus{Node: "node-a", BootID: "b1", LeaseSeconds: 15, CPUCores: 512, MemoryMB: 1 << 20}); !errors.Is(err, trust.ErrOverAttestation) {
		t.Errorf("a CPU inventory on a node attested with GPUs only: err %v, want ErrOverAttestation", err)
	}
	// Refused again after an accepted heartbeat: a new event.
	if n := f.auditCount(t, trust.AuditRefused, "node-a"); n != 2 {
		t.Errorf("refusals raised %d times, want 2 (before and after the accepted heartbeats)", n)
	}
}

// TestUnattestedNodeIsRefusedWhenAttestationIsRequired: with
// RequireAttestation a node nobody attested is not believed at all; the
// same heartbeat is recorded once the node is attested.
func TestUnattestedNodeIsRefusedWhenAttestationIsRequired(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	strict := fleet.New(f.pool, fleet.Options{Clock: f.clock, Log: slog.New(slog.DiscardHandler), RequireAttestation: true})
	st := busapi.NodeStatus{Node: "node-b", BootID: "b1", LeaseSeconds: 15, GPUs: gpus(0, 2, "H100-80GB", nil)}
	if _, err := strict.Observe(t.Context(), st); !errors.Is(err, trust.ErrOverAttestation) {
		t.Fatalf("unattested node: err %v, want ErrOverAttestation", err)
	}
	att := trust.NewAttestations(f.pool, f.clock)
	if err := att.Attest(t.Context(), f.root, "node-b", trust.Inventory{GPUs: []trust.GPUs{{Type: "H100-80GB", Count: 2, Slices: []string{busapi.ProfileFull}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := strict.Observe(t.Context(), st); err != nil {
		t.Fatalf("attested node: %v", err)
	}
}
