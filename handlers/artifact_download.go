package handlers

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"os"
	"reflect"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-chi/chi/v5"

	"modelplane/errdefs"
)

// agentAuthorized reports whether r carries the node agents' credential.
// Until nodes enrol with credentials of their own, every agent presents the
// one shared token of the configuration (MP_AGENT_TOKEN); a server without
// one refuses every agent. The per-node check replaces this one function.
func (s *Server) agentAuthorized(r *http.Request) bool {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || s.AgentToken == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(token), []byte(s.AgentToken)) == 1
}

// internalArtifact handles GET /internal/artifacts/{sha256}: a node agent
// fetches a version's manifest or one of its files by digest, in ranges to
// resume an interrupted download.
func (s *Server) internalArtifact(w http.ResponseWriter, r *http.Request) {
	if !s.agentAuthorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="modelplane-agent"`)
		writeProblem(w, http.StatusUnauthorized, "node agent credentials required")
		return
	}
	digest := chi.URLParam(r, "sha256")
	f, err := s.Registry.Artifact(r.Context(), digest)
	if err != nil {
		s.blobError(w, r, err)
		return
	}
	defer f.Close()
	serveBlob(w, r, f, digest)
}

// versionFileDownload handles GET
// /api/v1/models/{model}/versions/{version}/files/{path}: a team member
// downloads one file of their version.
func (s *Server) versionFileDownload(w http.ResponseWriter, r *http.Request) {
	f, digest, err := s.Registry.VersionFile(r.Context(), principal(r.Context()),
		chi.URLParam(r, "model"), chi.URLParam(r, "version"), chi.URLParam(r, "*"))
	if err != nil {
		s.blobError(w, r, err)
		return
	}
	defer f.Close()
	serveBlob(w, r, f, digest)
}

func (s *Server) blobError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errdefs.ErrNotFound) {
		writeProblem(w, http.StatusNotFound, "not found")
		return
	}
	s.fail(w, r, err)
}

// serveBlob streams a stored blob with Range and If-Range support. The
// digest is the strong ETag: content under a digest never changes, so a
// client resuming with If-Range gets the rest of the same bytes.
func serveBlob(w http.ResponseWriter, r *http.Request, f *os.File, digest string) {
	st, err := f.Stat()
	if err != nil {
		writeProblem(w, http.StatusInternalServerError, "internal error")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("ETag", `"`+digest+`"`)
	w.Header().Set("X-Content-SHA256", digest)
	w.Header().Set("Cache-Control", "private, max-age=31536000, immutable")
	http.ServeContent(w, r, "", st.ModTime(), f)
}

// versionFileOperation documents the plain chi download route.
func versionFileOperation(reg huma.Registry) *huma.Operation {
	str := &huma.Schema{Type: "string"}
	return &huma.Operation{
		OperationID: "version-file-download", Method: http.MethodGet, Path: "/models/{model}/versions/{version}/files/{path}",
		Tags: []string{"models"}, Summary: "Download a file of a version",
		Description: "Streams one file of the version's manifest (path may contain slashes). Supports Range and If-Range " +
			"(the ETag is the file's sha256), so an interrupted download resumes.",
		Parameters: []*huma.Param{{Name: "model", In: "path", Required: true, Schema: str},
			{Name: "version", In: "path", Required: true, Schema: str},
			{Name: "path", In: "path", Required: true, Schema: str},
			{Name: "Range", In: "header", Schema: str}},
		Responses: map[string]*huma.Response{
			"200":     {Description: "The file", Content: map[string]*huma.MediaType{"application/octet-stream": {Schema: &huma.Schema{Type: "string", Format: "binary"}}}},
			"206":     {Description: "The requested range", Content: map[string]*huma.MediaType{"application/octet-stream": {Schema: &huma.Schema{Type: "string", Format: "binary"}}}},
			"default": {Description: "Error", Content: map[string]*huma.MediaType{"application/problem+json": {Schema: reg.Schema(reflect.TypeFor[huma.ErrorModel](), true, "ErrorModel")}}},
		},
	}
}
