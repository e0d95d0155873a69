package handlers

import (
	"context"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"modelplane/endpoint"
	"modelplane/errdefs"
	"modelplane/registry"
	"modelplane/rollout"
)

// The portal's {endpoint}, {model} and {rollout} are loaded once, by the
// extract middleware below, through the team-scoped domain service: an
// object the caller may not see answers the same 404 as one that does not
// exist, before the handler runs. Handlers read the row with the
// accessors (endpointParam, modelParam, rolloutParam), never with
// chi.URLParam and a lookup of their own (Coder's httpmw/*param.go).
//
// On the API, the version upload (a plain chi route) extracts {model}
// too, answering problems (extractModelAPI), so an upload to a model the
// caller cannot see is refused before its body is read. The huma
// operations keep their path fields: each is one domain call whose SQL
// scopes by team, so a middleware would add a query and remove no check,
// and huma runs operation middleware before it validates the input, which
// would put 404 before the 400s the API answers for bad input today.

type paramKey int

const (
	keyEndpointParam paramKey = iota
	keyModelParam
	keyRolloutParam
)

// extractEndpoint loads {endpoint} for endpointParam.
func (s *Server) extractEndpoint(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e, err := s.Endpoints.Get(r.Context(), pageFrame(r).user, chi.URLParam(r, "endpoint"))
		if err != nil {
			s.portalError(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), keyEndpointParam, e)))
	})
}

// endpointParam is the {endpoint} extractEndpoint loaded, with its traffic
// split and replicas. It panics on a route without extractEndpoint: that
// is a mistake in routes.go, not a request to answer.
func endpointParam(r *http.Request) endpoint.Endpoint {
	e, ok := r.Context().Value(keyEndpointParam).(endpoint.Endpoint)
	if !ok {
		panic("endpointParam: the route does not extract {endpoint}")
	}
	return e
}

// extractModel loads {model} for modelParam, answering a failure with an
// error page.
func (s *Server) extractModel(next http.Handler) http.Handler {
	return s.modelLoader(s.portalError)(next)
}

// extractModelAPI is extractModel for the API, answering problems.
func (s *Server) extractModelAPI(next http.Handler) http.Handler {
	return s.modelLoader(s.problem)(next)
}

func (s *Server) modelLoader(failed func(http.ResponseWriter, *http.Request, error)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m, err := s.Registry.Model(r.Context(), principal(r.Context()), chi.URLParam(r, "model"))
			if err != nil {
				failed(w, r, err)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), keyModelParam, m)))
		})
	}
}

// modelParam is the {model} extractModel loaded; it panics on a route
// without extractModel.
func modelParam(r *http.Request) registry.Model {
	m, ok := r.Context().Value(keyModelParam).(registry.Model)
	if !ok {
		panic("modelParam: the route does not extract {model}")
	}
	return m
}

// extractRollout loads {rollout}, a rollout id, for rolloutParam; an id
// that is not a positive number is not found, like any other.
func (s *Server) extractRollout(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(chi.URLParam(r, "rollout"), 10, 64)
		if err != nil || id <= 0 {
			s.portalError(w, r, errdefs.ErrNotFound)
			return
		}
		ro, err := s.Rollouts.Get(r.Context(), pageFrame(r).user, id)
		if err != nil {
			s.portalError(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), keyRolloutParam, ro)))
	})
}

// rolloutParam is the {rollout} extractRollout loaded, with its timeline
// and approvals; it panics on a route without extractRollout.
func rolloutParam(r *http.Request) rollout.Rollout {
	ro, ok := r.Context().Value(keyRolloutParam).(rollout.Rollout)
	if !ok {
		panic("rolloutParam: the route does not extract {rollout}")
	}
	return ro
}
