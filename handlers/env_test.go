package handlers

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/artifact"
	"modelplane/auth"
	"modelplane/auth/devidp"
	"modelplane/busapi"
	"modelplane/controlplane"
	"modelplane/db"
	"modelplane/egress"
	"modelplane/endpoint"
	"modelplane/enrollment"
	"modelplane/internal/chtest"
	"modelplane/internal/natstest"
	"modelplane/internal/pgtest"
	"modelplane/notify"
	"modelplane/outbox"
	"modelplane/registry"
	"modelplane/tenant"
)

func TestMain(m *testing.M) {
	code := m.Run()
	chtest.Stop()
	pgtest.Stop()
	os.Exit(code)
}

// testEnv is a real control plane over a fresh PostgreSQL database and a real
// OIDC provider, served over HTTP, with two teams (risk, search), the demo
// users and one API key per role.
type testEnv struct {
	rolloutOnce sync.Once
	rolloutID   int64
	uploadOnce  sync.Once
	uploadID    string
	// riskWebhook is a webhook of team risk, riskDelivery one of its
	// deliveries (seed).
	riskWebhook, riskDelivery int64

	t    *testing.T
	srv  *Server
	ts   *httptest.Server
	URL  string
	idp  *devidp.IdP
	pool *pgxpool.Pool
	// Keys by role name: platform-admin, finance, risk-admin, risk-engineer,
	// risk-viewer, search-admin, search-viewer.
	Keys map[string]string
}

// system seeds fixtures as a platform admin.
var system = &auth.Principal{Name: "test-seed", Via: "system", PlatformRole: auth.RolePlatformAdmin}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	return newTestEnvWith(t, envOptions{})
}

// envOptions change what newTestEnvWith builds.
type envOptions struct {
	// CH backs the services that read ClickHouse (chargeback, advice,
	// traffic, drift); nil leaves them out, as a control plane without
	// ClickHouse would.
	CH driver.Conn
	// Clock is the services' and the handlers' clock (nil: the real one).
	Clock quartz.Clock
	// Deps, when set, changes the handlers' dependencies last.
	Deps func(d *Deps, pool *pgxpool.Pool)
	// Listener, when set, wraps the server's listener (to watch its
	// connections).
	Listener func(net.Listener) net.Listener
}

// idpKeyOnce is the one RSA key every test environment's IdP signs with.
// Generating a 2048-bit key took over a quarter of this package's CPU under
// -race when each environment made its own. Sharing it keeps environments
// apart all the same: each IdP has its own issuer URL and client, which a
// token must name to verify.
var idpKeyOnce = sync.OnceValues(func() (*rsa.PrivateKey, error) { return rsa.GenerateKey(rand.Reader, 2048) })

func idpKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	key, err := idpKeyOnce()
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// testGatewayKey is the key the portal's Try it sends to the stand-in gateway.
const testGatewayKey = "mp_test_gateway_key"

// newTestEnvWith is newTestEnv built as o says.
func newTestEnvWith(t *testing.T, o envOptions) *testEnv {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.New(t)
	ts := httptest.NewUnstartedServer(nil)
	base := "http://" + ts.Listener.Addr().String()
	idp, err := devidp.Start(devidp.Config{RedirectURLs: []string{base + "/auth/callback"}, Key: idpKey(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idp.Close() })
	oidc, err := auth.NewOIDC(ctx, auth.OIDCConfig{Issuer: idp.Issuer(), ClientID: idp.ClientID(), ClientSecret: idp.ClientSecret(),
		RedirectURL: base + "/auth/callback"}, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.Clock == nil {
		o.Clock = quartz.NewReal()
	}
	cp, err := controlplane.New(controlplane.Stores{Pool: pool, CH: o.CH}, controlplane.Config{Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Clock: o.Clock, OIDC: oidc, SecretKeys: testSecretKeys(t), Egress: &egress.Policy{Hosts: []string{"hooks.example.com"}}, Sessions: auth.SessionConfig{IdleTimeout: time.Hour, AbsoluteTimeout: 2 * time.Hour},
		ArtifactDir: t.TempDir(), MaxUploadBytes: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var devUsers []DevUser
	for _, u := range idp.Users() {
		devUsers = append(devUsers, DevUser{Email: u.Email, Description: u.Description})
	}
	cp.Enrollment = enrollment.New(pool, natstest.Auth(t), nil, o.Clock)
	deps := Deps{
		Set:            &cp.Set,
		Clock:          o.Clock,
		Ready:          map[string]Pinger{"postgres": pool},
		DevUsers:       devUsers,
		MaxUploadBytes: 2 << 20,
		MaxBodyBytes:   DefaultMaxBodyBytes,
	}
	// A stand-in gateway that echoes what Try it sends it.
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"path": r.URL.Path, "authorization": r.Header.Get("Authorization"), "body": string(b)})
	}))
	t.Cleanup(gw.Close)
	deps.GatewayURL, deps.GatewayKey = gw.URL, testGatewayKey
	if o.Deps != nil {
		o.Deps(&deps, pool)
	}
	srv := New(deps)
	ts.Config.Handler = srv.Handler()
	if o.Listener != nil {
		ts.Listener = o.Listener(ts.Listener)
	}
	ts.Start()
	t.Cleanup(ts.Close)
	e := &testEnv{t: t, srv: srv, ts: ts, URL: base, idp: idp, pool: pool, Keys: map[string]string{}}
	e.seed(ctx)
	return e
}

func (e *testEnv) seed(ctx context.Context) {
	t := e.t
	for _, team := range []string{"risk", "search"} {
		if _, err := e.srv.Tenant.CreateTeam(ctx, system, team, team); err != nil {
			t.Fatal(err)
		}
	}
	q := db.New(e.pool)
	for _, u := range e.idp.Users() {
		row, err := q.UserUpsert(ctx, db.UserUpsertParams{Issuer: e.idp.Issuer(), Subject: u.Subject, Email: u.Email, Name: u.Name})
		if err != nil {
			t.Fatal(err)
		}
		if u.PlatformRole != "" {
			role := u.PlatformRole
			if err := q.UserSetPlatformRole(ctx, db.UserSetPlatformRoleParams{ID: row.ID, PlatformRole: &role}); err != nil {
				t.Fatal(err)
			}
		}
		if u.Team != "" {
			tm, err := q.TeamGetByName(ctx, u.Team)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := q.TeamMemberUpsert(ctx, db.TeamMemberUpsertParams{TeamID: tm.ID, UserID: row.ID, Role: u.TeamRole}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, req := range map[string]tenant.KeyRequest{
		"platform-admin": {Role: auth.RolePlatformAdmin},
		"finance":        {Role: auth.RoleFinance},
		"risk-admin":     {Team: "risk", Role: auth.RoleAdmin},
		"risk-engineer":  {Team: "risk", Role: auth.RoleEngineer},
		"risk-viewer":    {Team: "risk", Role: auth.RoleViewer},
		"search-admin":   {Team: "search", Role: auth.RoleAdmin},
		"search-viewer":  {Team: "search", Role: auth.RoleViewer},
	} {
		req.Name = name
		raw, _, err := e.srv.Tenant.CreateKey(ctx, system, req)
		if err != nil {
			t.Fatal(err)
		}
		e.Keys[name] = raw
	}
	// One model, two versions and one endpoint per team.
	for _, team := range []string{"risk", "search"} {
		model := team + "-model"
		if _, err := e.srv.Registry.CreateModel(ctx, system, registry.ModelSpec{Team: team, Name: model, Task: registry.TaskClassification,
			InputSchema: json.RawMessage(`{"type":"object"}`), FeatureNames: []string{"x"}}); err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{"v1", "v2"} {
			files := map[string][]byte{"model.safetensors": safetensorsFile(team + v)}
			if _, err := e.srv.Registry.RegisterVersion(ctx, system, model, registry.VersionSpec{Name: v, Runtime: "onnxruntime",
				Resources: registry.Resources{GPUCount: 1, GPUMemoryMB: 1024}}, manifestOf(files), filesOf(files)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.srv.Endpoints.Create(ctx, system, endpoint.Spec{Name: team + "-endpoint", Model: model, Version: "v1", Runtime: "onnxruntime",
			Settings: endpoint.Settings{InstanceProfile: "mig-1g.10gb", MinReplicas: 1, MaxReplicas: 2, Tier: "standard", RetentionDays: 30}}); err != nil {
			t.Fatal(err)
		}
	}
	// A webhook of risk with one delivery, for the routes that name them.
	wh, _, err := e.srv.Webhooks.Create(ctx, system, notify.WebhookSpec{Team: "risk", URL: "https://hooks.example.com/risk", EventTypes: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	e.riskWebhook = wh.ID
	if err := db.InTx(ctx, e.pool, func(q *db.Queries) error {
		return outbox.Event(ctx, q, "risk", busapi.Event{Kind: "rollout", ID: 1, Name: "risk-endpoint", Type: "state", State: "progressing", At: time.Now()})
	}); err != nil {
		t.Fatal(err)
	}
	ds, err := e.srv.Webhooks.Deliveries(ctx, system, wh.ID, 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("seed delivery: %v, %v", ds, err)
	}
	e.riskDelivery = ds[0].ID
}

// testSecretKeys is a server key for the environment's webhook secrets.
func testSecretKeys(t *testing.T) *notify.Keyring {
	k, err := notify.ParseKeyring(notify.NewKey())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// safetensorsFile is a small valid safetensors file whose bytes depend on tag.
func safetensorsFile(tag string) []byte {
	header := []byte(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"__metadata__":{"tag":"` + tag + `"}}`)
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.Write(header)
	b.Write([]byte{0, 0, 128, 63})
	return b.Bytes()
}

func manifestOf(files map[string][]byte) []byte {
	m := map[string]string{}
	for name, b := range files {
		sum := sha256.Sum256(b)
		m[name] = hex.EncodeToString(sum[:])
	}
	out, _ := json.Marshal(m)
	return out
}

func filesOf(files map[string][]byte) registry.Files {
	return func(u *artifact.Upload) error {
		for name, b := range files {
			if err := u.Add(context.Background(), name, bytes.NewReader(b)); err != nil {
				return err
			}
		}
		return nil
	}
}

// api calls the REST API with a key ("" for none) and returns the status and body.
func (e *testEnv) api(key, method, path string, body any, headers ...string) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewReader([]byte(b))
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.URL+"/api/v1"+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
