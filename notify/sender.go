package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/busapi"
	"modelplane/db"
	"modelplane/egress"
	"modelplane/service"
)

// The headers of a webhook delivery. The signature is
// "v1=" + hex(HMAC-SHA256(secret, timestamp + "." + body)): a receiver
// recomputes it over the raw body with its secret, compares in constant
// time, and refuses a timestamp far from its clock (replays).
const (
	HeaderID        = "Modelplane-Delivery-Id"
	HeaderType      = "Modelplane-Event-Type"
	HeaderTimestamp = "Modelplane-Timestamp"
	HeaderSignature = "Modelplane-Signature"
)

// Sign returns the signature header's value of body sent at ts.
func Sign(secret []byte, ts int64, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(strconv.FormatInt(ts, 10)))
	m.Write([]byte("."))
	m.Write(body)
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

// Body is what a webhook delivery POSTs.
type Body struct {
	// ID is the delivery's id: a receiver that saw it already (a retry
	// after its answer was lost) can skip it.
	ID    int64        `json:"id"`
	Type  string       `json:"type"`
	Team  string       `json:"team"`
	Event busapi.Event `json:"event"`
}

// SenderConfig configures a Sender.
type SenderConfig struct {
	Pool *pgxpool.Pool
	Keys *Keyring
	// Egress is the policy webhook addresses are dialled under.
	Egress *egress.Policy
	// Alertmanager is the base URL of an Alertmanager (its v2 API is
	// under /api/v2); empty sends no alerts (their deliveries are
	// marked skipped).
	Alertmanager string
	Clock        quartz.Clock
	Log          *slog.Logger
	// Timeout bounds one call (10 s); Backoff is the wait before each
	// retry, and its length + 1 the tries before a delivery is dead
	// (10 s, 30 s, 2 min, 10 min: five tries over about 13 minutes).
	Timeout time.Duration
	Backoff []time.Duration
	// Interval is how often due deliveries are looked for (1 s).
	Interval time.Duration
}

// Sender sends due deliveries; run it on the leader only.
type Sender struct {
	cfg     SenderConfig
	webhook *http.Client
	plain   *http.Client
	wake    chan struct{}
}

// NewSender returns a Sender.
func NewSender(cfg SenderConfig) *Sender {
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Backoff == nil {
		cfg.Backoff = []time.Duration{10 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute}
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	return &Sender{cfg: cfg, webhook: cfg.Egress.Client(cfg.Timeout),
		plain: &http.Client{Timeout: cfg.Timeout}, wake: make(chan struct{}, 1)}
}

// Wake makes the sender look for due deliveries now (after a change wrote
// some).
func (s *Sender) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Service is the sender's loop. It first re-seals webhook secrets sealed
// with an older server key (ResealAll), so a rotated key can be dropped
// once a leader ran.
func (s *Sender) Service() service.Service {
	return service.NewFunc(func(ctx context.Context) {
		if n, err := ResealAll(ctx, s.cfg.Pool, s.cfg.Keys); err != nil {
			s.cfg.Log.Warn("re-seal webhook secrets", slog.String("error", err.Error()))
		} else if n > 0 {
			s.cfg.Log.Info("re-sealed webhook secrets with the current server key", slog.Int("webhooks", n))
		}
		service.Tick(ctx, s.cfg.Clock, s.cfg.Interval, s.wake, func(ctx context.Context) {
			if _, err := s.SendDue(ctx); err != nil && ctx.Err() == nil {
				s.cfg.Log.Warn("deliveries", slog.String("error", err.Error()))
			}
		})
	})
}

// claimBatch is how many deliveries one pass takes.
const claimBatch = 32

// SendDue claims the due deliveries, sends them concurrently and records
// each outcome; it returns how many it claimed.
func (s *Sender) SendDue(ctx context.Context) (int, error) {
	now := s.cfg.Clock.Now()
	q := db.New(s.cfg.Pool)
	// The lease outlasts a call, so a delivery is claimed again only if
	// this sender died before recording it.
	rows, err := q.DeliveryClaimDue(ctx, db.DeliveryClaimDueParams{LeaseUntil: now.Add(s.cfg.Timeout + 30*time.Second), Now: now, Lim: claimBatch})
	if err != nil {
		return 0, fmt.Errorf("claim deliveries: %w", err)
	}
	var wg sync.WaitGroup
	for _, r := range rows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.send(ctx, q, r)
		}()
	}
	wg.Wait()
	return len(rows), nil
}

// outcome is one try's result.
type outcome struct {
	status  int
	err     string
	skipped bool
}

func (s *Sender) send(ctx context.Context, q *db.Queries, r db.DeliveryClaimDueRow) {
	var ev busapi.Event
	var o outcome
	if err := json.Unmarshal(r.Event, &ev); err != nil {
		o = outcome{err: "unreadable event: " + err.Error()}
	} else if r.WebhookID != nil {
		o = s.toWebhook(ctx, q, r, ev)
	} else {
		o = s.toAlertmanager(ctx, r.Team, ev)
	}
	now := s.cfg.Clock.Now()
	p := db.DeliveryRecordParams{ID: r.ID, Now: now, NextAt: now, LastStatus: int32(o.status), LastError: truncate(o.err, 500)}
	switch {
	case o.skipped:
		p.State = "skipped"
	case o.err == "" && o.status/100 == 2:
		p.State = "delivered"
	case int(r.Attempts) > len(s.cfg.Backoff):
		p.State = "dead"
	default:
		p.State, p.NextAt = "pending", now.Add(s.cfg.Backoff[r.Attempts-1])
	}
	// Recorded even when ctx ended mid-call, so a stop never leaves a
	// delivery claimed for its whole lease without a word.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := q.DeliveryRecord(rctx, p); err != nil {
		s.cfg.Log.Warn("record delivery", slog.Int64("delivery", r.ID), slog.String("error", err.Error()))
	}
}

func (s *Sender) toWebhook(ctx context.Context, q *db.Queries, r db.DeliveryClaimDueRow, ev busapi.Event) outcome {
	w, err := q.WebhookSecret(ctx, *r.WebhookID)
	if err != nil {
		return outcome{err: "webhook: " + err.Error()}
	}
	secret, err := s.cfg.Keys.Open(w.Secret, w.KeyID)
	if err != nil {
		return outcome{err: err.Error()}
	}
	body, _ := json.Marshal(Body{ID: r.ID, Type: r.EventType, Team: r.Team, Event: ev})
	ts := s.cfg.Clock.Now().Unix()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.Url, bytes.NewReader(body))
	if err != nil {
		return outcome{err: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "modelplane-webhook/1")
	req.Header.Set(HeaderID, strconv.FormatInt(r.ID, 10))
	req.Header.Set(HeaderType, r.EventType)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, Sign(secret, ts, body))
	return s.do(s.webhook, req)
}

func (s *Sender) toAlertmanager(ctx context.Context, team string, ev busapi.Event) outcome {
	if s.cfg.Alertmanager == "" {
		return outcome{skipped: true, err: "no Alertmanager configured (MP_ALERTMANAGER_URL)"}
	}
	a, ok := alertOf(team, ev)
	if !ok {
		return outcome{skipped: true, err: "not an alert"}
	}
	body, _ := json.Marshal([]amAlert{a})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(s.cfg.Alertmanager, "/")+"/api/v2/alerts", bytes.NewReader(body))
	if err != nil {
		return outcome{err: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	return s.do(s.plain, req)
}

func (s *Sender) do(c *http.Client, req *http.Request) outcome {
	resp, err := c.Do(req)
	if err != nil {
		return outcome{err: err.Error()}
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return outcome{status: resp.StatusCode, err: strings.TrimSpace(string(msg))}
	}
	return outcome{status: resp.StatusCode}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
