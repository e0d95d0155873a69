package handlers

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"hash"
	"io"
	"log/slog"
	"net/http"

	"modelplane/db"
)

// idempotency makes a POST with an Idempotency-Key header safe to retry: the
// first response (below 500) is stored per caller and key; the same key with
// the same method, path and body replays it; the same key with another request
// is a 422; a retry while the first is still running is a 409. The body is
// hashed while the handler streams it, so uploads are never buffered.
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
		q := db.New(s.Pool)
		who := p.Via + ":" + p.Name
		n, err := q.IdempotencyBegin(ctx, db.IdempotencyBeginParams{Principal: who, Key: key})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if n == 0 {
			s.replay(w, r, q, who, key)
			return
		}
		h := newRequestHash(r)
		r.Body = readCloser{io.TeeReader(r.Body, h), r.Body}
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			if rec.status >= 500 || rec.status == 0 {
				_ = q.IdempotencyAbort(ctx, db.IdempotencyAbortParams{Principal: who, Key: key})
			}
		}()
		next.ServeHTTP(rec, r)
		if rec.status >= 500 {
			return
		}
		_, _ = io.Copy(h, r.Body) // a handler may stop reading early; hash what it left
		err = q.IdempotencyFinish(ctx, db.IdempotencyFinishParams{Principal: who, Key: key, RequestHash: h.Sum(nil),
			Status: int32(rec.status), ContentType: rec.Header().Get("Content-Type"), Body: rec.body.Bytes()})
		if err != nil {
			s.Log.ErrorContext(ctx, "store idempotency record", slog.String("error", err.Error()))
		}
	})
}

func (s *Server) replay(w http.ResponseWriter, r *http.Request, q *db.Queries, who, key string) {
	rec, err := q.IdempotencyGet(r.Context(), db.IdempotencyGetParams{Principal: who, Key: key})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if rec.Status == 0 {
		writeProblem(w, http.StatusConflict, "a request with this Idempotency-Key is still in progress")
		return
	}
	h := newRequestHash(r)
	if _, err := io.Copy(h, r.Body); err != nil {
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
	w.Header().Set("Idempotent-Replayed", "true")
	w.WriteHeader(int(rec.Status))
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

type readCloser struct {
	io.Reader
	io.Closer
}

// recorder passes a response through and keeps a copy for replay.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
	wrote  bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}
