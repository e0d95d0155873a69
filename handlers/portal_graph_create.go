package handlers

import (
	"errors"
	"net/http"
	"strings"

	"modelplane/endpoint"
	"modelplane/errdefs"
	"modelplane/graph"
	"modelplane/web"
)

// graphExample is the new-graph form's starting definition.
const graphExample = `{
  "entry": "steps",
  "nodes": [
    {"id": "steps", "type": "sequence", "steps": ["first", "second"]},
    {"id": "first", "type": "call", "endpoint": "ENDPOINT", "timeout_ms": 1000},
    {"id": "second", "type": "call", "endpoint": "ENDPOINT", "soft": true}
  ]
}`

func (s *Server) graphNewProps(w http.ResponseWriter, r *http.Request, name, team, def string, errs web.FieldErrors) web.GraphNewProps {
	f := pageFrame(r)
	p := web.GraphNewProps{Layout: f.layout(w, "New graph", "endpoints"), Name: name, Team: team, Definition: def, Errors: errs}
	for _, m := range f.user.Teams {
		if f.user.CanWrite(m.TeamID) {
			p.Teams = append(p.Teams, m.Team)
		}
	}
	return p
}

func (s *Server) portalGraphNew(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, web.GraphNewPage(s.graphNewProps(w, r, "", "", graphExample, nil)))
}

// portalGraphCreate publishes a graph endpoint from the form's JSON
// definition and opens its page; a refused definition comes back with the
// reason, which names the node.
func (s *Server) portalGraphCreate(w http.ResponseWriter, r *http.Request) {
	name, team, def := r.PostFormValue("name"), r.PostFormValue("team"), r.PostFormValue("graph")
	errs := web.FieldErrors{}
	d, err := graph.Parse([]byte(def))
	if err != nil {
		errs["graph"] = strings.TrimPrefix(err.Error(), "graph definition: ")
	} else {
		_, err = s.Endpoints.CreateGraph(r.Context(), pageFrame(r).user, endpoint.GraphSpec{Name: name, Team: team, Definition: *d})
		if err == nil {
			redirectFlash(w, r, "/endpoints/"+name, "Graph "+name+" published.")
			return
		}
		var ok bool
		if errs, ok = fieldErrors(err); !ok {
			switch {
			case errors.Is(err, errdefs.ErrConflict):
				errs = web.FieldErrors{"name": "an endpoint or model with this name already exists"}
			case errors.Is(err, errdefs.ErrNotFound):
				errs = web.FieldErrors{"team": "no such team of yours"}
			default:
				s.portalError(w, r, err)
				return
			}
		}
	}
	s.render(w, r, http.StatusUnprocessableEntity, web.GraphNewPage(s.graphNewProps(w, r, name, team, def, errs)))
}

// portalGraphVersionCreate saves a new version of the graph endpoint from
// the form on its page; a refusal re-renders the page with the reason,
// naming the node, and what was typed.
func (s *Server) portalGraphVersionCreate(w http.ResponseWriter, r *http.Request) {
	e := endpointParam(r)
	version, def := r.PostFormValue("graph_version"), r.PostFormValue("graph_definition")
	errs := web.FieldErrors{}
	d, err := graph.Parse([]byte(def))
	if err != nil {
		errs["graph_definition"] = strings.TrimPrefix(err.Error(), "graph definition: ")
	} else {
		_, err = s.Endpoints.AddGraphVersion(r.Context(), pageFrame(r).user, e.Name, version, *d)
		if err == nil {
			redirectFlash(w, r, "/endpoints/"+e.Name, "Version "+version+" saved; start a rollout to move traffic to it.")
			return
		}
		var ok bool
		if errs, ok = fieldErrors(err); !ok {
			if !errors.Is(err, errdefs.ErrConflict) {
				s.portalError(w, r, err)
				return
			}
			errs = web.FieldErrors{"graph_version": "this graph already has a version " + version}
		}
		// The domain names the form's fields version and graph.
		if m, ok := errs["version"]; ok {
			errs["graph_version"] = m
		}
		if m, ok := errs["graph"]; ok {
			errs["graph_definition"] = m
		}
	}
	props, err := s.endpointProps(w, r, e)
	if err != nil {
		s.portalError(w, r, err)
		return
	}
	if props.Graph == nil {
		s.renderError(w, r, http.StatusBadRequest, "not a graph endpoint")
		return
	}
	props.Graph.NewVersion, props.Graph.NewDefinition, props.Graph.Errors = version, def, errs
	s.render(w, r, http.StatusUnprocessableEntity, web.EndpointPage(props))
}
