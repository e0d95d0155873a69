package handlers

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"modelplane/idempotency"
)

// idempotency makes a POST with an Idempotency-Key header safe to retry: the
// first response (below 500) is stored per caller and key; the same key with
// the same method, path and body replays it; the same key with another request
// is a 422; a retry while the first is still running is a 409. The body is
// hashed while the handler streams it, so uploads are never buffered.
//
// A response marked Cache-Control: no-store (a new API key) holds a secret
// shown once: it is not kept, and a retry gets a 409 saying the request
// succeeded, so a retry never creates a second key nor shows the first again.
func (s *Server) idempotency(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		p := principal(r.Context())
		if r.Method != http.MethodPost || key == "" || p == nil {
			next.ServeHTTP(w, r)
			return
		}
		if len(key) > 255 {
			writeProblem(w, http.StatusBadRequest, "Idempotency-Key must be at most 255 characters")
			return
		}
		ctx := r.Context()
		who := p.Namespace()
		first, err := s.Idempotency.Begin(ctx, who, key)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if !first {
			s.replay(w, r, who, key)
			return
		}
		limit := s.MaxBodyBytes
		if limit <= 0 {
			limit = DefaultMaxBodyBytes
		}
		body := &hashingBody{rc: r.Body, h: newRequestHash(r), limit: limit}
		r.Body = body
		rec := &recorder{ResponseWriter: w}
		finished := false
		defer func() {
			if !finished {
				_ = s.Idempotency.Abort(ctx, who, key)
			}
		}()
		next.ServeHTTP(rec, r)
		// Only a request whose whole body was hashed can be matched later; a
		// handler that stopped early (body too large) leaves nothing stored.
		if rec.status >= 500 || rec.status == 0 || !body.drain() {
			return
		}
		status, ctype, stored := rec.status, rec.Header().Get("Content-Type"), rec.body.Bytes()
		if strings.Contains(rec.Header().Get("Cache-Control"), "no-store") {
			status, ctype = http.StatusConflict, "application/problem+json"
			stored, _ = json.Marshal(&huma.ErrorModel{Status: status, Title: http.StatusText(status),
				Detail: "the request with this Idempotency-Key succeeded; its response held a secret that is shown only once"})
		}
		err = s.Idempotency.Finish(ctx, who, key, idempotency.Record{RequestHash: body.h.Sum(nil),
			Status: status, ContentType: ctype, Location: rec.Header().Get("Location"), Body: stored})
		if err != nil {
			s.Log.ErrorContext(ctx, "store idempotency record", slog.String("error", err.Error()))
			return
		}
		finished = true
	})
}

func (s *Server) replay(w http.ResponseWriter, r *http.Request, who, key string) {
	rec, err := s.Idempotency.Get(r.Context(), who, key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if rec.Status == 0 {
		writeProblem(w, http.StatusConflict, "a request with this Idempotency-Key is still in progress")
		return
	}
	h := newRequestHash(r)
	if _, err := io.Copy(h, http.MaxBytesReader(w, r.Body, s.MaxUploadBytes)); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeProblem(w, http.StatusRequestEntityTooLarge, "request body too large")
			return
		}
		s.fail(w, r, err)
		return
	}
	if !bytes.Equal(h.Sum(nil), rec.RequestHash) {
		writeProblem(w, http.StatusUnprocessableEntity, "Idempotency-Key was already used with a different request")
		return
	}
	w.Header().Set("Content-Type", rec.ContentType)
	if rec.Location != "" {
		w.Header().Set("Location", rec.Location)
	}
	w.Header().Set("Idempotent-Replayed", "true")
	w.WriteHeader(rec.Status)
	_, _ = w.Write(rec.Body)
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	s.Log.ErrorContext(r.Context(), "request failed", slog.String("error", err.Error()), slog.String("request_id", requestID(r.Context())))
	writeProblem(w, http.StatusInternalServerError, "internal error")
}

func newRequestHash(r *http.Request) hash.Hash {
	h := sha256.New()
	io.WriteString(h, r.Method+" "+r.URL.Path+"\n")
	return h
}

// hashingBody hashes a request body as the handler reads it.
type hashingBody struct {
	rc  io.ReadCloser
	h   hash.Hash
	eof bool
	// limit bounds what drain reads after the handler is done.
	limit int64
}

func (b *hashingBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.h.Write(p[:n])
	if errors.Is(err, io.EOF) {
		b.eof = true
	}
	return n, err
}

func (b *hashingBody) Close() error { return b.rc.Close() }

// drain hashes what the handler left unread and reports whether the whole
// body was hashed.
//
// It reads at most limit bytes more: a body that goes on past that (or a
// caller who trickles it) is not worth keeping a record of, and must not
// keep the server reading and hashing.
func (b *hashingBody) drain() bool {
	if b.eof {
		return true
	}
	_, err := io.Copy(io.Discard, io.LimitReader(b, b.limit))
	return err == nil && b.eof
}

// recorder passes a response through and keeps a copy for replay.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}
