package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestIdempotencyKey checks POST with an Idempotency-Key: the same key and
// request replay the first answer without running the handler again; the
// same key with another request is a 422; keys belong to their caller; and
// concurrent duplicates create one object.
func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	admin, engineer := e.Keys["risk-admin"], e.Keys["risk-engineer"]
	model := func(name string) *payload {
		return jsonPayload(map[string]any{"team": "risk", "name": name, "task": "classification"})
	}
	replayed := func(r response) bool { return r.header.Get("Idempotent-Replayed") == "true" }
	// sameAnswer checks that second replays first.
	sameAnswer := func(t *testing.T, what string, first, second response) {
		t.Helper()
		if replayed(first) {
			t.Errorf("%s: first answer says Idempotent-Replayed", what)
		}
		if !replayed(second) {
			t.Errorf("%s: second answer lacks Idempotent-Replayed: true (status %d %s)", what, second.status, second)
		}
		if second.status != first.status || !bytes.Equal(second.body, first.body) {
			t.Errorf("%s: second answer = %d %s; want the first, %d %s", what, second.status, second, first.status, first)
		}
		if a, b := first.header.Get("Content-Type"), second.header.Get("Content-Type"); a != b {
			t.Errorf("%s: second Content-Type = %q; want %q", what, b, a)
		}
	}
	// count is how many audit records of an action name an object.
	count := func(t *testing.T, action, object string) int {
		t.Helper()
		var audit struct {
			Items []struct {
				ObjectName string `json:"object_name"`
			} `json:"items"`
		}
		e.getJSON(t, e.Keys["platform-admin"], "/audit?limit=100&action="+action, &audit)
		n := 0
		for _, a := range audit.Items {
			if a.ObjectName == object {
				n++
			}
		}
		return n
	}
	// keysNamed is how many API keys carry a name (names need not be unique).
	keysNamed := func(t *testing.T, name string) int {
		t.Helper()
		var keys struct {
			Items []struct {
				Name string `json:"name"`
			} `json:"items"`
		}
		e.getJSON(t, admin, "/api-keys?limit=500", &keys)
		n := 0
		for _, k := range keys.Items {
			if k.Name == name {
				n++
			}
		}
		return n
	}

	t.Run("same key same body replays", func(t *testing.T) {
		t.Parallel()
		first := e.call(t, admin, "POST", "/models", model("idem-a"), "Idempotency-Key", "k-a")
		if first.status != http.StatusCreated {
			t.Fatalf("first POST /models = %d %s; want 201", first.status, first)
		}
		for i := range 2 {
			sameAnswer(t, fmt.Sprintf("replay %d", i+1), first, e.call(t, admin, "POST", "/models", model("idem-a"), "Idempotency-Key", "k-a"))
		}
		if n := count(t, "model.create", "idem-a"); n != 1 {
			t.Errorf("model idem-a created %d times; want once", n)
		}
		// Without the header the same request runs again and conflicts.
		if got := e.call(t, admin, "POST", "/models", model("idem-a")); got.status != http.StatusConflict {
			t.Errorf("POST /models idem-a without Idempotency-Key = %d %s; want 409", got.status, got)
		}
	})

	t.Run("same key same body replays an upload", func(t *testing.T) {
		t.Parallel()
		body := versionUpload("idem-v")
		first := e.call(t, admin, "POST", "/models/risk-model/versions", body, "Idempotency-Key", "k-upload")
		if first.status != http.StatusCreated {
			t.Fatalf("first upload = %d %s; want 201", first.status, first)
		}
		sameAnswer(t, "upload replay", first, e.call(t, admin, "POST", "/models/risk-model/versions", body, "Idempotency-Key", "k-upload"))
		if n := count(t, "version.register", "risk-model/idem-v"); n != 1 {
			t.Errorf("version idem-v registered %d times; want once", n)
		}
	})

	t.Run("same key other body is 422", func(t *testing.T) {
		t.Parallel()
		if got := e.call(t, admin, "POST", "/models", model("idem-b"), "Idempotency-Key", "k-b"); got.status != http.StatusCreated {
			t.Fatalf("first POST /models = %d %s; want 201", got.status, got)
		}
		got := e.call(t, admin, "POST", "/models", model("idem-b2"), "Idempotency-Key", "k-b")
		problem(t, "same key, other body", got, http.StatusUnprocessableEntity)
		got = e.call(t, admin, "POST", "/endpoints", jsonPayload(map[string]any{"name": "idem-b", "model": "idem-b", "version": "v1"}), "Idempotency-Key", "k-b")
		problem(t, "same key, other path", got, http.StatusUnprocessableEntity)
		if got := e.call(t, admin, "GET", "/models/idem-b2", nil); got.status != http.StatusNotFound {
			t.Errorf("GET /models/idem-b2 = %d; want 404: the refused request must not run", got.status)
		}
	})

	t.Run("keys belong to their caller", func(t *testing.T) {
		t.Parallel()
		if got := e.call(t, admin, "POST", "/models", model("idem-c"), "Idempotency-Key", "k-c"); got.status != http.StatusCreated {
			t.Fatalf("admin POST /models = %d %s; want 201", got.status, got)
		}
		// Another caller's identical request runs: the name is taken.
		got := e.call(t, engineer, "POST", "/models", model("idem-c"), "Idempotency-Key", "k-c")
		if got.status != http.StatusConflict || replayed(got) {
			t.Errorf("engineer, same key and body = %d replayed=%v %s; want 409, not a replay of the admin's answer", got.status, replayed(got), got)
		}
		// And another body under the same key is no 422 for it.
		got = e.call(t, engineer, "POST", "/models", model("idem-c2"), "Idempotency-Key", "k-c2")
		if got.status != http.StatusCreated {
			t.Fatalf("engineer POST /models idem-c2 = %d %s; want 201", got.status, got)
		}
		got = e.call(t, admin, "POST", "/models", model("idem-c3"), "Idempotency-Key", "k-c2")
		if got.status != http.StatusCreated || replayed(got) {
			t.Errorf("admin reusing the engineer's key with another body = %d replayed=%v %s; want 201", got.status, replayed(got), got)
		}
	})

	t.Run("failed first answer is replayed", func(t *testing.T) {
		t.Parallel()
		big := jsonPayload(map[string]any{"team": "risk", "name": "idem-big", "task": "llm", "description": strings.Repeat("x", 1<<20)})
		for _, c := range []struct {
			name, key string
			body      *payload
			want      int
		}{
			{"bad name", admin, model("Idem_Bad"), http.StatusBadRequest},
			{"viewer", e.Keys["risk-viewer"], model("idem-viewer"), http.StatusForbidden},
			{"other team", e.Keys["search-admin"], model("idem-other"), http.StatusNotFound},
			{"too large", admin, big, http.StatusRequestEntityTooLarge},
		} {
			t.Run(c.name, func(t *testing.T) {
				first := e.call(t, c.key, "POST", "/models", c.body, "Idempotency-Key", "k-fail-"+c.name)
				problem(t, "first", first, c.want)
				second := e.call(t, c.key, "POST", "/models", c.body, "Idempotency-Key", "k-fail-"+c.name)
				problem(t, "retry", second, c.want)
				if c.want != http.StatusRequestEntityTooLarge {
					sameAnswer(t, c.name, first, second)
				}
			})
		}
	})

	t.Run("bad keys", func(t *testing.T) {
		t.Parallel()
		got := e.call(t, admin, "POST", "/models", model("idem-long"), "Idempotency-Key", strings.Repeat("k", 256))
		problem(t, "256-character Idempotency-Key", got, http.StatusBadRequest)
		if got := e.call(t, admin, "GET", "/models/idem-long", nil); got.status != http.StatusNotFound {
			t.Errorf("GET /models/idem-long = %d; want 404", got.status)
		}
	})

	t.Run("concurrent duplicates create one object", func(t *testing.T) {
		t.Parallel()
		// API key names need not be unique, so a second run of the handler
		// would show as a second key.
		for round := range 4 {
			name := fmt.Sprintf("idem-concurrent-%d", round)
			body := jsonPayload(map[string]any{"name": name, "team": "risk", "role": "viewer"})
			var wg sync.WaitGroup
			got := make([]response, 6)
			for i := range got {
				wg.Go(func() {
					got[i] = e.call(t, admin, "POST", "/api-keys", body, "Idempotency-Key", "k-"+name)
				})
			}
			wg.Wait()
			created := 0
			for _, r := range got {
				switch {
				case r.status == http.StatusCreated:
					created++
				case r.status == http.StatusConflict:
					problem(t, "concurrent duplicate", r, http.StatusConflict)
				default:
					t.Errorf("concurrent POST /api-keys = %d %s; want 201 or 409", r.status, r)
				}
			}
			if created == 0 {
				t.Errorf("round %d: no request succeeded", round)
			}
			if n := keysNamed(t, name); n != 1 {
				t.Errorf("round %d: %d keys named %s; want 1", round, n, name)
			}
		}
	})

	t.Run("no secret at rest", func(t *testing.T) {
		t.Parallel()
		// API keys are stored hashed (DESIGN.md section 12); the answer kept
		// for replay must not hold the key in clear either.
		got := e.call(t, admin, "POST", "/api-keys", jsonPayload(map[string]any{"name": "idem-secret", "team": "risk", "role": "viewer"}),
			"Idempotency-Key", "k-secret")
		if got.status != http.StatusCreated {
			t.Fatalf("POST /api-keys = %d %s; want 201", got.status, got)
		}
		var k struct {
			Key string `json:"key"`
		}
		if err := json.Unmarshal(got.body, &k); err != nil || k.Key == "" {
			t.Fatalf("POST /api-keys answer %s has no key", got)
		}
		var n int
		err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_keys WHERE position($1::bytea IN body) > 0`,
			[]byte(k.Key)).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("the new API key is stored in clear in %d idempotency record(s); want none", n)
		}
	})
}
