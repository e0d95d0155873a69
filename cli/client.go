package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"modelplane/buildinfo"
)

// Problem is an application/problem+json answer of the API or the gateway.
type Problem struct {
	Status int    `json:"status"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
	Errors []struct {
		Location string `json:"location"`
		Message  string `json:"message"`
	} `json:"errors"`
}

// Error prints the problem for a person: status, detail, then one line
// per field it names.
func (p *Problem) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", p.Status, http.StatusText(p.Status))
	if p.Detail != "" {
		b.WriteString(": " + p.Detail)
	}
	for _, e := range p.Errors {
		loc := strings.TrimPrefix(e.Location, "body.")
		fmt.Fprintf(&b, "\n  %s: %s", loc, e.Message)
	}
	return b.String()
}

// client calls the API with a key and says which version it is.
type client struct {
	t       target
	http    *http.Client
	version string
	warn    io.Writer
	once    sync.Once
	// renew reads the login token again, refreshed when it is about to
	// expire, for a long-lived command (watch) that reconnects; nil when
	// the client calls with a key.
	renew func(ctx context.Context) error
}

func (a *app) apiClient() (*client, error) {
	if a.client != nil {
		return a.client, nil
	}
	t, err := a.resolve()
	if err != nil {
		return nil, err
	}
	h, err := a.httpFor(t)
	if err != nil {
		return nil, err
	}
	c := &client{t: t, http: h, version: a.env.Version, warn: a.env.Stderr}
	if t.key == "" {
		// No key anywhere: the token login kept for this server, if any.
		idp, err := a.idpHTTP(t)
		if err != nil {
			return nil, err
		}
		c.renew = func(ctx context.Context) error {
			k, err := a.loginToken(ctx, idp, t.api)
			if err == nil && k != "" {
				c.t.key = k
			}
			return err
		}
		if err := c.renew(context.Background()); err != nil {
			return nil, err
		}
	}
	a.client = c
	return a.client, nil
}

// httpFor is the HTTP client for t: Env.HTTP, else one that trusts t's CA
// bundle when it names one.
func (a *app) httpFor(t target) (*http.Client, error) {
	if a.env.HTTP != nil {
		return a.env.HTTP, nil
	}
	h := &http.Client{Timeout: 0} // uploads may take long; each call has its context
	if t.ca != "" {
		tr, err := trusting(t.ca)
		if err != nil {
			return nil, err
		}
		h.Transport = tr
	}
	return h, nil
}

// request builds a request to the API path (under /api/v1) with query.
func (c *client) request(ctx context.Context, method, path string, query url.Values, body io.Reader) (*http.Request, error) {
	u := c.t.api + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if c.t.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.t.key)
	}
	req.Header.Set(buildinfo.Header, c.version)
	req.Header.Set("User-Agent", "modelplane-cli/"+c.version)
	req.Header.Set("Accept", "application/json")
	return req, nil
}

// send sends req and returns the response if it is a 2xx; anything else
// is read as a problem.
func (c *client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	c.checkVersion(resp)
	if resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, readProblem(resp)
}

// checkVersion warns once when the server's build differs from the
// client's.
func (c *client) checkVersion(resp *http.Response) {
	server := resp.Header.Get(buildinfo.Header)
	if server == "" || server == c.version {
		return
	}
	c.once.Do(func() {
		fmt.Fprintf(c.warn, "modelplane: warning: this client is %s and the server %s; they may not agree on every field\n", c.version, server)
	})
}

// readProblem reads a non-2xx answer as a Problem, whatever its body.
func readProblem(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	p := &Problem{Status: resp.StatusCode}
	if json.Unmarshal(b, p) != nil || p.Status == 0 {
		p.Status = resp.StatusCode
		p.Detail = strings.TrimSpace(string(b))
	}
	p.Status = resp.StatusCode
	return p
}

// call sends a JSON request (body nil for none) and returns the answer's
// body. A POST carries an Idempotency-Key and is sent again with it when
// the transport or the server failed, so the API acts on it once; other
// methods are sent once.
func (c *client) call(ctx context.Context, method, path string, query url.Values, body any) (json.RawMessage, error) {
	var payload []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		payload = b
	}
	key, attempts := "", 1
	if method == http.MethodPost {
		key, attempts = newIdempotencyKey(), uploadAttempts
	}
	var err error
	for attempt := 1; attempt <= attempts; attempt++ {
		var b []byte
		if b, err = c.callOnce(ctx, method, path, query, payload, key); err == nil {
			return b, nil
		}
		if !retryable(err) || ctx.Err() != nil || attempt == attempts {
			break
		}
		fmt.Fprintf(c.warn, "modelplane: %s %s: attempt %d failed (%v); retrying with the same Idempotency-Key\n", method, path, attempt, err)
		if berr := backoff(ctx, attempt); berr != nil {
			return nil, berr
		}
	}
	return nil, err
}

func (c *client) callOnce(ctx context.Context, method, path string, query url.Values, payload []byte, key string) ([]byte, error) {
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := c.request(ctx, method, path, query, rd)
	if err != nil {
		return nil, err
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// list reads every page of a list (limit > 0 stops after that many
// items) and returns the items.
func (c *client) list(ctx context.Context, path string, query url.Values, limit int) ([]json.RawMessage, error) {
	if query == nil {
		query = url.Values{}
	}
	var out []json.RawMessage
	for {
		b, err := c.call(ctx, http.MethodGet, path, query, nil)
		if err != nil {
			return nil, err
		}
		var page struct {
			Items      []json.RawMessage `json:"items"`
			NextCursor string            `json:"next_cursor"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		out = append(out, page.Items...)
		if limit > 0 && len(out) >= limit {
			return out[:limit], nil
		}
		if page.NextCursor == "" {
			return out, nil
		}
		query.Set("cursor", page.NextCursor)
	}
}

// retryable reports whether a failed attempt may be sent again with the
// same Idempotency-Key: the transport failed or the server did.
func retryable(err error) bool {
	if p, ok := err.(*Problem); ok {
		return p.Status >= 500 || p.Status == http.StatusConflict && strings.Contains(p.Detail, "in progress")
	}
	return err != nil
}

// backoff is the pause before attempt n (1-based) of a retried upload.
func backoff(ctx context.Context, n int) error {
	t := time.NewTimer(time.Duration(n*n) * 500 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// trusting is the default transport trusting only the CAs of the PEM
// bundle file (--tls-ca, MP_TLS_CA).
func trusting(file string) (*http.Transport, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, usagef("--tls-ca: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, usagef("--tls-ca %s: no PEM certificate in it", file)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	return tr, nil
}
