package kubetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
)

// auditPolicy logs every write (and the fence reads of AuditMark) once,
// when the response is complete, at the Metadata level: who did what to
// which object, with no bodies. Reads are not logged: the controllers' own
// lists and watches would bury a test's writes.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: Metadata
  verbs: ["get"]
  resources:
  - group: ""
    resources: ["configmaps"]
    resourceNames: ["` + fenceName + `"]
- level: None
`

// fenceName is the ConfigMap AuditMark reads (it never exists) so that it
// can find its own request in the log.
const fenceName = "kubetest-audit-fence"

// AuditEvent is one request in the API server's audit log: a write, by
// whom, to what, and how it was answered.
type AuditEvent struct {
	AuditID string `json:"auditID"`
	Verb    string `json:"verb"`
	// RequestURI carries the query, such as ?fieldManager=...
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"user"`
	UserAgent string `json:"userAgent"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		APIGroup    string `json:"apiGroup"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// String reads as "alice patch apps/deployments ns/name 200".
func (e AuditEvent) String() string {
	res := e.ObjectRef.Resource
	if e.ObjectRef.APIGroup != "" {
		res = e.ObjectRef.APIGroup + "/" + res
	}
	if e.ObjectRef.Subresource != "" {
		res += "/" + e.ObjectRef.Subresource
	}
	return fmt.Sprintf("%s %s %s %s/%s %d", e.User.Username, e.Verb, res, e.ObjectRef.Namespace, e.ObjectRef.Name, e.ResponseStatus.Code)
}

// AuditMark is a place in the audit log: AuditSince returns what was
// logged after it.
type AuditMark struct{ offset int64 }

// AuditMark returns the end of the audit log as of now: every request that
// was answered before the call is before the mark. It finds that end by
// sending a request of its own (a read of a ConfigMap that does not exist,
// with an Audit-ID it chose) and waiting until the API server has logged
// it, so it never guesses how long logging takes.
func (c *Cluster) AuditMark(t testing.TB) AuditMark {
	t.Helper()
	_, end := c.fence(t)
	return AuditMark{offset: end}
}

// AuditSince returns the writes logged after m and before now (the same
// fence as AuditMark marks "now"), fence reads left out. A test filters
// them, for example by User.Username to count one client's writes.
func (c *Cluster) AuditSince(t testing.TB, m AuditMark) []AuditEvent {
	t.Helper()
	events, end := c.fence(t)
	var out []AuditEvent
	for _, e := range events {
		if e.off >= m.offset && e.off < end && e.ObjectRef.Name != fenceName {
			out = append(out, e.AuditEvent)
		}
	}
	return out
}

type loggedEvent struct {
	AuditEvent
	off int64 // offset of the line's start
}

// fence sends the fence request and returns every complete event in the
// log up to it and the offset just past its line.
func (c *Cluster) fence(t testing.TB) ([]loggedEvent, int64) {
	t.Helper()
	id := string(uuid.NewUUID())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A missing ConfigMap answers 404; that answer is logged too.
	_ = c.client.CoreV1().RESTClient().Get().Namespace("default").Resource("configmaps").
		Name(fenceName).SetHeader("Audit-ID", id).Do(ctx).Error()
	for {
		events, end, found, err := c.readAudit(id)
		if err != nil {
			t.Fatalf("kubetest: read audit log: %v", err)
		}
		if found {
			return events, end
		}
		select {
		case <-ctx.Done():
			t.Fatalf("kubetest: the audit log did not show request %s within 2 minutes (%s)", id, c.auditPath)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// readAudit parses the complete lines of the audit log, stopping after the
// event with auditID id if there is one.
func (c *Cluster) readAudit(id string) (events []loggedEvent, end int64, found bool, err error) {
	f, err := os.Open(c.auditPath)
	if err != nil {
		return nil, 0, false, err
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, 0, false, err
	}
	var off int64
	for {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			return events, off, false, nil
		}
		start := off
		line := data[off : off+int64(i)]
		off += int64(i) + 1
		var e AuditEvent
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, 0, false, fmt.Errorf("line at %d: %w", start, err)
		}
		events = append(events, loggedEvent{AuditEvent: e, off: start})
		if e.AuditID == id && strings.EqualFold(e.Verb, "get") {
			return events, off, true, nil
		}
	}
}
