package registry_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sort"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/artifact"
	"modelplane/auth"
	"modelplane/db"
	"modelplane/egress"
	"modelplane/field"
	"modelplane/internal/pgtest"
	"modelplane/registry"
)

// safetensors holds one F32 tensor of shape [2].
var safetensors = func() []byte {
	h := `{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	b = append(b, h...)
	return append(b, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40)
}()

const configJSON = `{"architectures":["LlamaForCausalLM"],"hidden_size":4096}`

// pickle is {'a': 1} pickled with protocol 4.
var pickle = []byte("\x80\x04\x95\n\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94K\x01s.")

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// upFile is one uploaded file.
type upFile struct {
	path string
	data []byte
}

// upload is a set of files to upload, in order.
type upload []upFile

// files returns the registry.Files streaming u.
func (u upload) files() registry.Files {
	return func(up *artifact.Upload) error {
		for _, f := range u {
			if err := up.Add(context.Background(), f.path, bytes.NewReader(f.data)); err != nil {
				return err
			}
		}
		return nil
	}
}

// manifest returns the manifest listing u with correct digests.
func (u upload) manifest() []byte {
	m := map[string]string{}
	for _, f := range u {
		m[f.path] = digest(f.data)
	}
	b, _ := json.Marshal(m)
	return b
}

// limits for the fixture: one file at most 512 bytes, an upload at most
// enough for the safetensors file, the config and 20 bytes more.
var limits = artifact.Limits{MaxFileBytes: 512, MaxTotalBytes: int64(len(safetensors) + len(configJSON) + 20)}

// fixture is a fresh database with teams risk and search, a registry over a
// temporary store, and principals of each role.
type fixture struct {
	pool  *pgxpool.Pool
	store *artifact.Store
	svc   *registry.Service

	riskID, searchID int64

	root, riskAdmin, riskEng, riskViewer, searchEng *auth.Principal
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := t.Context()
	pool := pgtest.New(t)
	store, err := artifact.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{pool: pool, store: store, svc: registry.New(pool, store, limits).WithEgress(&egress.Policy{Hosts: []string{"artifacts.example.com"}})}
	q := db.New(pool)
	for name, id := range map[string]*int64{"risk": &f.riskID, "search": &f.searchID} {
		tm, err := q.TeamCreate(ctx, db.TeamCreateParams{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		*id = tm.ID
	}
	in := func(name string, teamID int64, team string, role auth.Role) *auth.Principal {
		return &auth.Principal{Name: name, Via: "session", Teams: []auth.Membership{{TeamID: teamID, Team: team, Role: role}}}
	}
	f.root = &auth.Principal{Name: "root@example.com", Via: "session", PlatformRole: auth.RolePlatformAdmin}
	f.riskAdmin = in("ann@example.com", f.riskID, "risk", auth.RoleAdmin)
	f.riskEng = in("bob@example.com", f.riskID, "risk", auth.RoleEngineer)
	f.riskViewer = in("val@example.com", f.riskID, "risk", auth.RoleViewer)
	f.searchEng = in("sue@example.com", f.searchID, "search", auth.RoleEngineer)
	return f
}

// model creates a model of risk named name.
func (f *fixture) model(t *testing.T, name string) registry.Model {
	t.Helper()
	m, err := f.svc.CreateModel(t.Context(), f.riskEng, registry.ModelSpec{Team: "risk", Name: name, Task: registry.TaskLLM})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// external registers version name of model with an external artifact.
func (f *fixture) external(t *testing.T, model, name, parent string) registry.Version {
	t.Helper()
	v, err := f.svc.RegisterVersion(t.Context(), f.riskEng, model, registry.VersionSpec{Name: name, Runtime: "vllm",
		Format: "safetensors", ArtifactURI: "s3://models/" + model + "/" + name, Lineage: registry.Lineage{ParentVersion: parent}},
		upload{{"model.safetensors", safetensors}}.manifest(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// count returns a count(*) query's answer.
func (f *fixture) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(t.Context(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (f *fixture) audits(t *testing.T) int { return f.count(t, "SELECT count(*) FROM audit_log") }
func (f *fixture) versions(t *testing.T) int {
	return f.count(t, "SELECT count(*) FROM model_versions")
}

// fields returns the fields named by a field.Errors in err's chain, sorted.
func fields(err error) []string {
	var ve field.Errors
	if !errors.As(err, &ve) {
		return nil
	}
	out := make([]string, len(ve))
	for i, e := range ve {
		out[i] = e.Field
	}
	sort.Strings(out)
	return out
}

func hasField(err error, field string) bool {
	for _, f := range fields(err) {
		if f == field {
			return true
		}
	}
	return false
}
