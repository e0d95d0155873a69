package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"modelplane/artifact"
	"modelplane/auth"
	"modelplane/enrollment"
	"modelplane/errdefs"
	"modelplane/field"
	"modelplane/tenant"
)

// statusOf maps a domain error to an HTTP status and a message safe to show.
// Not-found and not-yours are the same 404; anything unknown is a 500 whose
// detail is not shown.
func statusOf(err error) (int, string, []*huma.ErrorDetail) {
	var verrs field.Errors
	switch {
	case errors.As(err, &verrs):
		details := make([]*huma.ErrorDetail, len(verrs))
		for i, f := range verrs {
			details[i] = &huma.ErrorDetail{Location: "body." + f.Field, Message: f.Message}
		}
		return http.StatusBadRequest, "validation failed", details
	case errors.Is(err, enrollment.ErrInvalidToken):
		// The sentinel chain only: which of used, expired or revoked.
		return http.StatusUnauthorized, err.Error(), nil
	case errors.Is(err, enrollment.ErrNotPlaced):
		return http.StatusForbidden, enrollment.ErrNotPlaced.Error(), nil
	case errors.Is(err, auth.ErrUnauthenticated):
		return http.StatusUnauthorized, "authentication required", nil
	case errors.Is(err, auth.ErrForbidden):
		return http.StatusForbidden, shownOr(err, "your role does not allow this"), nil
	case errors.Is(err, errdefs.ErrNotFound):
		return http.StatusNotFound, "not found", nil
	case errors.Is(err, errdefs.ErrConflict):
		return http.StatusConflict, shownOr(err, "already exists"), nil
	case errors.Is(err, tenant.ErrLastAdmin):
		return http.StatusConflict, tenant.ErrLastAdmin.Error(), nil
	case errors.Is(err, artifact.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, rejection(err), nil
	case errors.Is(err, artifact.ErrRejected):
		return http.StatusUnprocessableEntity, rejection(err), nil
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", tooBig.Limit), nil
	}
	return http.StatusInternalServerError, "internal error", nil
}

// shown is a domain error whose message says the caller what to do and is
// safe to show (a rollout conflict naming the active rollout, a four-eyes
// refusal); its status still comes from the sentinel it matches.
type shown interface{ Shown() string }

// shownOr is err's own message when it has one to show, else fallback.
func shownOr(err error, fallback string) string {
	var s shown
	if errors.As(err, &s) {
		return s.Shown()
	}
	return fallback
}

// rejection is the artifact package's "file: reason", without whatever
// wrapping the error picked up on its way here.
func rejection(err error) string {
	var r *artifact.Rejection
	if errors.As(err, &r) {
		return r.Error()
	}
	return err.Error()
}

// apiError turns a domain error into a huma problem response, logging 500s once.
func (s *Server) apiError(ctx context.Context, err error) error {
	status, msg, details := statusOf(err)
	if status == http.StatusInternalServerError {
		s.Log.ErrorContext(ctx, "request failed", slog.String("error", err.Error()), slog.String("request_id", requestID(ctx)))
	}
	errs := make([]error, len(details))
	for i, d := range details {
		errs[i] = d
	}
	return huma.NewError(status, msg, errs...)
}

// writeProblem writes an application/problem+json response outside huma
// (middleware and the streaming upload).
// problem answers err as a problem, logging it when it is a 500, for the
// API's plain chi handlers (huma operations return apiError instead).
func (s *Server) problem(w http.ResponseWriter, r *http.Request, err error) {
	status, msg, details := statusOf(err)
	if status == http.StatusInternalServerError {
		s.fail(w, r, err)
		return
	}
	writeProblem(w, status, msg, details...)
}

func writeProblem(w http.ResponseWriter, status int, detail string, details ...*huma.ErrorDetail) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(&huma.ErrorModel{Status: status, Title: http.StatusText(status), Detail: detail, Errors: details})
}

// Huma answers its own validation failures (malformed JSON, wrong types,
// unknown fields) 422; ours are 400, so that a client sees one status for
// bad input whoever caught it. Huma's only error constructor hooks are the
// package variables NewError and NewErrorWithContext, shared by every huma
// API in the process, so instead of overwriting them the API rewrites those
// failures on their way out with two hooks of its own Config:
// invalidInputAs400, a transformer, turns the body into a 400 problem, and
// statusContext, installed by the withStatusOverride middleware, sends the
// status the transformer chose (huma calls the transformers, then SetStatus,
// on the same context).

// statusContext is a huma.Context whose next SetStatus a transformer may
// override.
type statusContext struct {
	humaContext
	override int
}

// humaContext names the embedded huma.Context so that its Context method is
// promoted (a field called Context would hide it).
type humaContext = huma.Context

func (c *statusContext) SetStatus(code int) {
	if c.override != 0 {
		code, c.override = c.override, 0
	}
	c.humaContext.SetStatus(code)
}

// Unwrap gives adapters' Unwrap helpers the context underneath.
func (c *statusContext) Unwrap() huma.Context { return c.humaContext }

// withStatusOverride is the API middleware that hands every operation a
// statusContext.
func withStatusOverride(ctx huma.Context, next func(huma.Context)) {
	next(&statusContext{humaContext: ctx})
}

// invalidInputAs400 is the transformer that makes huma's own 422
// "validation failed" a 400 with the same details; every other body passes
// unchanged.
func invalidInputAs400(ctx huma.Context, _ string, v any) (any, error) {
	m, ok := v.(*huma.ErrorModel)
	if !ok || m.Status != http.StatusUnprocessableEntity || m.Detail != "validation failed" {
		return v, nil
	}
	sc, ok := ctx.(*statusContext)
	if !ok {
		return v, nil // no way to send the status: keep body and status in step
	}
	sc.override = http.StatusBadRequest
	out := *m
	out.Status, out.Title = http.StatusBadRequest, http.StatusText(http.StatusBadRequest)
	return &out, nil
}

func validateErr(name, msg string) error {
	return field.Errors{{Field: name, Message: msg}}
}
