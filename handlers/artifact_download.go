package handlers

import (
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-chi/chi/v5"

	"modelplane/enrollment"
	"modelplane/errdefs"
)

// artifactAccess decides whether r may read the blob digest. An enrolled
// node presents its own artifact token (mpn_...), which reads only the
// files of versions placed on that node: ErrNotPlaced for any other, a
// 403. The shared MP_AGENT_TOKEN (AgentToken) still works for agents that
// have not enrolled, when the operator configured one (docs/security.md).
// It answers the status to refuse with, or 0 to serve.
func (s *Server) artifactAccess(r *http.Request, digest string) (int, string) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return http.StatusUnauthorized, "node agent credentials required"
	}
	if s.Enrollment != nil && strings.HasPrefix(token, "mpn_") {
		_, err := s.Enrollment.AuthorizeArtifact(r.Context(), token, digest)
		switch {
		case err == nil:
			return 0, ""
		case errors.Is(err, enrollment.ErrNotPlaced):
			return http.StatusForbidden, enrollment.ErrNotPlaced.Error()
		case errors.Is(err, enrollment.ErrInvalidToken):
			return http.StatusUnauthorized, "invalid or revoked node credentials"
		default:
			s.Log.ErrorContext(r.Context(), "authorize artifact", slog.String("error", err.Error()), slog.String("request_id", requestID(r.Context())))
			return http.StatusInternalServerError, "internal error"
		}
	}
	if s.AgentToken != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.AgentToken)) == 1 {
		return 0, ""
	}
	return http.StatusUnauthorized, "invalid or revoked node credentials"
}

// internalArtifact handles GET /internal/artifacts/{sha256}: a node agent
// fetches a version's manifest or one of its files by digest, in ranges to
// resume an interrupted download.
func (s *Server) internalArtifact(w http.ResponseWriter, r *http.Request) {
	digest := chi.URLParam(r, "sha256")
	if status, msg := s.artifactAccess(r, digest); status != 0 {
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="modelplane-agent"`)
		}
		writeProblem(w, status, msg)
		return
	}
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
			"200":     {Description: "The file", Content: binaryContent()},
			"206":     {Description: "The requested range", Content: binaryContent()},
			"default": {Description: "Error", Content: map[string]*huma.MediaType{"application/problem+json": {Schema: reg.Schema(reflect.TypeFor[huma.ErrorModel](), true, "ErrorModel")}}},
		},
	}
}
