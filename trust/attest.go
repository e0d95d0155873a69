package trust

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/audit"
	"modelplane/auth"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/field"
)

// ErrOverAttestation means a heartbeat claimed more than its node's
// attested inventory (or a node with none, where attestation is required);
// the heartbeat is refused, counted and raised once as an event.
var ErrOverAttestation = errors.New("heartbeat claims more than the node's attested inventory")

// AuditRefused is the audit action (a platform event: no team) recorded
// when a node's heartbeats start being refused against its attestation.
const AuditRefused = "node.inventory_refused"

// GPUs are count GPUs of one type with one layout: Slices are the slice
// profiles of each, in order (["full"] for a whole GPU).
type GPUs struct {
	Type   string   `json:"type"`
	Count  int      `json:"count"`
	Slices []string `json:"slices"`
}

// Inventory is what a platform admin attests a node has: its GPUs by type
// and layout, or a CPU node's cores and memory. A heartbeat is believed up
// to it: fewer GPUs (one failed) or fewer cores are fine, more are not.
type Inventory struct {
	GPUs     []GPUs `json:"gpus,omitempty" doc:"The GPUs by type and layout; empty for a CPU node."`
	CPUCores int    `json:"cpu_cores,omitempty" doc:"A CPU node's cores."`
	MemoryMB int    `json:"memory_mb,omitempty" doc:"A CPU node's memory in MiB."`
}

// Attestations keeps the attested inventories of nodes.
type Attestations struct {
	pool  *pgxpool.Pool
	clock quartz.Clock
}

// NewAttestations returns the attestation records over pool; clock stamps
// each attestation.
func NewAttestations(pool *pgxpool.Pool, clock quartz.Clock) *Attestations {
	return &Attestations{pool: pool, clock: clock}
}

// Attest records what node has; platform admins only, audited. It replaces
// an earlier attestation and clears a refusal, so the next heartbeat is
// checked against the new inventory.
func (a *Attestations) Attest(ctx context.Context, p *auth.Principal, node string, inv Inventory) error {
	if !p.PlatformAdmin() {
		return auth.ErrForbidden
	}
	var errs field.Errors
	if !ValidNodeName(node) {
		errs.Add("node", "use up to 64 letters, digits, '-' and '_'")
	}
	if inv.CPUCores < 0 || inv.CPUCores > 1024 || inv.MemoryMB < 0 || inv.MemoryMB > 64*1024*1024 {
		errs.Add("cpu_cores", "cores 0 to 1024 and memory_mb 0 to 64 TiB")
	}
	total := 0
	for i, g := range inv.GPUs {
		if g.Type == "" || g.Count < 1 || len(g.Slices) == 0 || len(g.Slices) > 7 {
			errs.Add(fmt.Sprintf("gpus[%d]", i), "needs a type, a count of at least 1 and 1 to 7 slices")
		}
		total += g.Count
	}
	if total > 64 {
		errs.Add("gpus", "at most 64 GPUs, got %d", total)
	}
	if err := errs.Err(); err != nil {
		return err
	}
	raw, err := json.Marshal(inv.GPUs)
	if err != nil {
		return err
	}
	err = db.InTx(ctx, a.pool, func(q *db.Queries) error {
		prev, err := q.NodeAttestationGet(ctx, node)
		var before any
		if err == nil {
			before = inventoryOf(prev)
		} else if !errors.Is(err, db.ErrNotFound) {
			return err
		}
		if _, err := q.NodeAttestationSet(ctx, db.NodeAttestationSetParams{Node: node, GPUs: raw, CPUCores: int32(inv.CPUCores),
			MemoryMB: int32(inv.MemoryMB), AttestedBy: p.Actor(), AttestedAt: a.clock.Now()}); err != nil {
			return err
		}
		return audit.Record(ctx, q, p, audit.Entry{Action: "node.attest", ObjectType: "node", ObjectName: node, Before: before, After: inv})
	})
	if err != nil {
		return fmt.Errorf("attest node %s: %w", node, err)
	}
	return nil
}

func inventoryOf(row db.NodeAttestation) Inventory {
	inv := Inventory{CPUCores: int(row.CPUCores), MemoryMB: int(row.MemoryMB)}
	_ = json.Unmarshal(row.GPUs, &inv.GPUs)
	return inv
}

// Check returns nil when st claims no more than att, else why not, wrapping
// ErrOverAttestation: each GPU must match an attested GPU of its type and
// layout not yet taken by another, and a CPU node's cores and memory must
// be within the attested ones.
func Check(att Inventory, st busapi.NodeStatus) error {
	left := make([]int, len(att.GPUs))
	for i, g := range att.GPUs {
		left[i] = g.Count
	}
	for _, g := range st.GPUs {
		layout := make([]string, len(g.Slices))
		for j, s := range g.Slices {
			layout[j] = s.Profile
		}
		k := slices.IndexFunc(att.GPUs, func(a GPUs) bool { return a.Type == g.Type && slices.Equal(a.Slices, layout) })
		for k >= 0 && left[k] == 0 {
			next := slices.IndexFunc(att.GPUs[k+1:], func(a GPUs) bool { return a.Type == g.Type && slices.Equal(a.Slices, layout) })
			if next < 0 {
				k = -1
				break
			}
			k += 1 + next
		}
		if k < 0 {
			return fmt.Errorf("%w: GPU %d, a %s laid out as %s, is beyond the attested %s", ErrOverAttestation, g.Index, g.Type,
				strings.Join(layout, "+"), describe(att))
		}
		left[k]--
	}
	if st.CPUCores > att.CPUCores || st.MemoryMB > att.MemoryMB {
		return fmt.Errorf("%w: %d cores and %d MiB are beyond the attested %s", ErrOverAttestation, st.CPUCores, st.MemoryMB, describe(att))
	}
	return nil
}

// describe is an inventory as people read it: "8 × A100-80GB (full)".
func describe(inv Inventory) string {
	var parts []string
	for _, g := range inv.GPUs {
		parts = append(parts, fmt.Sprintf("%d × %s (%s)", g.Count, g.Type, strings.Join(g.Slices, "+")))
	}
	if inv.CPUCores > 0 || inv.MemoryMB > 0 {
		parts = append(parts, fmt.Sprintf("%d cores, %d MiB", inv.CPUCores, inv.MemoryMB))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// Verdict is what the intake does with one heartbeat's inventory.
type Verdict struct {
	// Err is nil when the heartbeat may be recorded; else it wraps
	// ErrOverAttestation and says why.
	Err error
	// Attested is false for a node with no attestation.
	Attested bool
}

// Judge checks st against its node's attestation inside the intake's
// transaction q. A node with none is believed when required is false (as
// before attestations existed) and refused when it is true. On a refusal
// it marks the node refused and, the first time, records AuditRefused: the
// event operators see, once until a heartbeat within the attestation
// clears the mark. A heartbeat within the
// attestation clears the mark.
func Judge(ctx context.Context, q *db.Queries, st busapi.NodeStatus, required bool, now time.Time) (Verdict, error) {
	row, err := q.NodeAttestationGet(ctx, st.Node)
	if errors.Is(err, db.ErrNotFound) {
		if !required {
			return Verdict{}, nil
		}
		// No row to mark: raised by the intake's counter and log alone.
		return Verdict{Err: fmt.Errorf("%w: node %s has no attested inventory", ErrOverAttestation, st.Node)}, nil
	}
	if err != nil {
		return Verdict{}, err
	}
	att := inventoryOf(row)
	why := Check(att, st)
	if why == nil {
		if row.RefusedAt != nil {
			if err := q.NodeAttestationClear(ctx, st.Node); err != nil {
				return Verdict{}, err
			}
		}
		return Verdict{Attested: true}, nil
	}
	first, err := q.NodeAttestationRefuse(ctx, db.NodeAttestationRefuseParams{Node: st.Node, At: now, Reason: why.Error()})
	if err != nil {
		return Verdict{}, err
	}
	if first {
		claimed := Inventory{CPUCores: st.CPUCores, MemoryMB: st.MemoryMB}
		for _, g := range st.GPUs {
			layout := make([]string, len(g.Slices))
			for j, s := range g.Slices {
				layout[j] = s.Profile
			}
			claimed.GPUs = append(claimed.GPUs, GPUs{Type: g.Type, Count: 1, Slices: layout})
		}
		if err := audit.Record(ctx, q, auth.System("fleet-intake"), audit.Entry{Action: AuditRefused, ObjectType: "node", ObjectName: st.Node,
			Before: att, After: map[string]any{"claimed": claimed, "reason": why.Error()}}); err != nil {
			return Verdict{}, err
		}
	}
	return Verdict{Err: fmt.Errorf("node %s: %w", st.Node, why), Attested: true}, nil
}
