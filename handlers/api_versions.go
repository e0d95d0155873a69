package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"

	"github.com/danielgtaylor/huma/v2"

	"modelplane/artifact"
	"modelplane/field"
	"modelplane/registry"
)

type versionPath struct {
	Model   string `path:"model"`
	Version string `path:"version"`
}

type versionsListInput struct {
	Model string `path:"model"`
	Page
}

// archivePart is the multipart form name of a tar (or tar.gz) archive holding
// some or all of the manifest's files.
const archivePart = "archive"

// versionJSON registers a version whose artifact is kept elsewhere.
type versionJSON struct {
	Metadata registry.VersionSpec `json:"metadata"`
	Manifest json.RawMessage      `json:"manifest"`
}

func (s *Server) registerVersions(api huma.API) {
	huma.Register(api, s.op("versions-list", http.MethodGet, "/models/{model}/versions", "List a model's versions", "models"),
		func(ctx context.Context, in *versionsListInput) (*List[registry.Version], error) {
			after, err := in.after()
			if err != nil {
				return nil, err
			}
			vs, err := s.Registry.Versions(ctx, principal(ctx), in.Model, after, in.Limit+1)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return page(vs, in.Limit, func(v registry.Version) int64 { return v.ID }), nil
		})
	huma.Register(api, s.op("version-get", http.MethodGet, "/models/{model}/versions/{version}", "Get a version", "models"),
		func(ctx context.Context, in *versionPath) (*One[registry.Version], error) {
			v, err := s.Registry.Version(ctx, principal(ctx), in.Model, in.Version)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[registry.Version]{Body: v}, nil
		})
	// Registration streams multipart uploads straight into the artifact store,
	// so it is a plain handler (mounted in routes.go) documented here by hand.
	reg := huma.Registry(api.OpenAPI().Components.Schemas)
	api.OpenAPI().AddOperation(&huma.Operation{
		OperationID: "versions-register", Method: http.MethodPost, Path: "/models/{model}/versions", Tags: []string{"models"},
		Summary: "Register an immutable version",
		Description: "multipart/form-data: a `metadata` part (JSON version metadata), a `manifest` part (JSON path → sha256), " +
			"then one part per file whose form name is its manifest path, or parts named `archive` holding a tar or tar.gz of such files; metadata and manifest must come first. " +
			"Or application/json {\"metadata\": {..., \"artifact_uri\": \"s3://...\", \"format\": \"safetensors\"}, \"manifest\": {...}} for artifacts kept elsewhere.",
		Parameters: []*huma.Param{{Name: "model", In: "path", Required: true, Schema: &huma.Schema{Type: "string"}}},
		RequestBody: &huma.RequestBody{Required: true, Content: map[string]*huma.MediaType{
			"multipart/form-data": {Schema: &huma.Schema{Type: "object", Properties: map[string]*huma.Schema{
				"metadata": reg.Schema(reflect.TypeFor[registry.VersionSpec](), true, "VersionSpec"),
				"manifest": {Type: "object", AdditionalProperties: &huma.Schema{Type: "string"}},
			}}},
			"application/json": {Schema: reg.Schema(reflect.TypeFor[versionJSON](), true, "VersionJSON")},
		}},
		Responses: map[string]*huma.Response{
			"201":     {Description: "Registered", Content: map[string]*huma.MediaType{"application/json": {Schema: reg.Schema(reflect.TypeFor[registry.Version](), true, "Version")}}},
			"default": {Description: "Error", Content: map[string]*huma.MediaType{"application/problem+json": {Schema: reg.Schema(reflect.TypeFor[huma.ErrorModel](), true, "ErrorModel")}}},
		},
	})
	// Downloads serve ranges of a file with http.ServeContent, so they too
	// are a plain handler mounted in routes.go.
	api.OpenAPI().AddOperation(versionFileOperation(reg))
	api.OpenAPI().AddOperation(replicaLogsOperation(reg))
	api.OpenAPI().AddOperation(rolloutEventsOperation(reg))
}

// versionRegister handles POST /api/v1/models/{model}/versions.
func (s *Server) versionRegister(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	p := principal(ctx)
	model := modelParam(r).Name
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var v registry.Version
	var err error
	switch mt {
	case "application/json":
		r.Body = http.MaxBytesReader(w, r.Body, s.MaxBodyBytes)
		var in versionJSON
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				writeProblem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", tooBig.Limit))
				return
			}
			writeProblem(w, http.StatusBadRequest, "malformed JSON body: "+err.Error())
			return
		}
		v, err = s.Registry.RegisterVersion(ctx, p, model, in.Metadata, in.Manifest, nil)
	case "multipart/form-data":
		r.Body = http.MaxBytesReader(w, r.Body, s.MaxUploadBytes)
		v, err = s.registerMultipart(ctx, r, model)
	default:
		writeProblem(w, http.StatusUnsupportedMediaType, "send multipart/form-data (upload) or application/json (external artifact)")
		return
	}
	if err != nil {
		s.problem(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/api/v1/models/%s/versions/%s", model, v.Name))
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) registerMultipart(ctx context.Context, r *http.Request, model string) (registry.Version, error) {
	mr, err := r.MultipartReader()
	if err != nil {
		return registry.Version{}, field.Errors{{Field: "body", Message: "is not a multipart body: " + err.Error()}}
	}
	var spec registry.VersionSpec
	var manifest []byte
	for manifest == nil || spec.Name == "" {
		part, err := mr.NextPart()
		if err != nil {
			return registry.Version{}, field.Errors{{Field: "body", Message: "needs a metadata and a manifest part before any file"}}
		}
		b, err := io.ReadAll(io.LimitReader(part, 1<<20))
		if err != nil {
			return registry.Version{}, err
		}
		switch part.FormName() {
		case "metadata":
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&spec); err != nil {
				return registry.Version{}, field.Errors{{Field: "metadata", Message: "is not valid version metadata: " + err.Error()}}
			}
			if spec.Name == "" {
				return registry.Version{}, field.Errors{{Field: "metadata.name", Message: "is required"}}
			}
		case "manifest":
			manifest = b
		default:
			return registry.Version{}, field.Errors{{Field: part.FormName(), Message: "file parts must come after the metadata and manifest parts"}}
		}
	}
	files := func(u *artifact.Upload) error {
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			add := u.Add
			if part.FormName() == archivePart {
				add = func(ctx context.Context, _ string, r io.Reader) error { return u.AddTar(ctx, r) }
			}
			if err := add(ctx, part.FormName(), part); err != nil {
				return err
			}
		}
	}
	return s.Registry.RegisterVersion(ctx, principal(ctx), model, spec, manifest, files)
}
