package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-chi/chi/v5"

	"modelplane/registry"
)

// UploadCreate starts a resumable upload: the version's metadata and the
// sha256 manifest of its files, checked now as registration would.
type UploadCreate struct {
	Metadata registry.VersionSpec `json:"metadata"`
	Manifest map[string]string    `json:"manifest" doc:"Every file's path and sha256."`
}

type uploadCreateInput struct {
	Model string `path:"model"`
	Body  UploadCreate
}

type uploadPath struct {
	Upload string `path:"upload"`
}

// UploadComplete names each manifest file's chunks in order.
type UploadComplete struct {
	Files map[string][]string `json:"files" doc:"Each manifest path and the sha256 of its chunks in order; the file is their concatenation."`
}

type uploadCompleteInput struct {
	Upload string `path:"upload"`
	Body   UploadComplete
}

type uploadCompleteOutput struct {
	Status int
	Body   registry.Version
}

func (s *Server) registerUploads(api huma.API) {
	huma.Register(api, s.op("uploads-create", http.MethodPost, "/models/{model}/uploads",
		"Start a resumable upload of a version: send its chunks, then complete it", "models"),
		func(ctx context.Context, in *uploadCreateInput) (*One[registry.UploadSession], error) {
			man, _ := json.Marshal(in.Body.Manifest)
			u, err := s.Registry.CreateUpload(ctx, principal(ctx), in.Model, in.Body.Metadata, man)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[registry.UploadSession]{Body: u}, nil
		})
	huma.Register(api, s.op("upload-get", http.MethodGet, "/uploads/{upload}", "An upload session with the chunks it holds", "models"),
		func(ctx context.Context, in *uploadPath) (*One[registry.UploadSession], error) {
			u, err := s.Registry.Upload(ctx, principal(ctx), in.Upload)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[registry.UploadSession]{Body: u}, nil
		})
	op := s.op("upload-complete", http.MethodPost, "/uploads/{upload}/complete",
		"Register the version from the session's chunks (201; 200 with the same version when completed before)", "models")
	huma.Register(api, op, func(ctx context.Context, in *uploadCompleteInput) (*uploadCompleteOutput, error) {
		v, created, err := s.Registry.CompleteUpload(ctx, principal(ctx), in.Upload, in.Body.Files)
		if err != nil {
			return nil, s.apiError(ctx, err)
		}
		out := &uploadCompleteOutput{Status: http.StatusOK, Body: v}
		if created {
			out.Status = http.StatusCreated
		}
		return out, nil
	})
	reg := huma.Registry(api.OpenAPI().Components.Schemas)
	api.OpenAPI().AddOperation(uploadChunkOperation(reg))
}

// uploadChunk handles PUT /api/v1/uploads/{upload}/chunks/{sha256}: the
// body is the chunk's bytes, streamed to the session's directory and
// checked against the sha256 the path names.
func (s *Server) uploadChunk(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	r.Body = http.MaxBytesReader(w, r.Body, registry.MaxChunkBytes+1)
	c, err := s.Registry.PutChunk(ctx, principal(ctx), chi.URLParam(r, "upload"), chi.URLParam(r, "sha256"), r.Body)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(c)
}

// uploadChunkOperation documents the plain chi route that takes a chunk's
// bytes, which streams its body and so is not a huma operation.
func uploadChunkOperation(reg huma.Registry) *huma.Operation {
	str := &huma.Schema{Type: "string"}
	problem := map[string]*huma.MediaType{"application/problem+json": {Schema: reg.Schema(reflect.TypeFor[huma.ErrorModel](), true, "ErrorModel")}}
	return &huma.Operation{
		OperationID: "upload-chunk", Method: http.MethodPut, Path: "/uploads/{upload}/chunks/{sha256}",
		Tags: []string{"models"}, Summary: "Store one chunk of an upload session",
		Description: "The body is the chunk's bytes (at most max_chunk_bytes); the path names their sha256. " +
			"A chunk the session holds already is kept. Chunks are kept until the session expires.",
		Parameters: []*huma.Param{{Name: "upload", In: "path", Required: true, Schema: str},
			{Name: "sha256", In: "path", Required: true, Schema: str}},
		RequestBody: &huma.RequestBody{Required: true, Content: binaryContent()},
		Responses: map[string]*huma.Response{
			"201": {Description: "Stored", Content: map[string]*huma.MediaType{"application/json": {Schema: reg.Schema(reflect.TypeFor[registry.Chunk](), true, "Chunk")}}},
			"400": {Description: "The body's sha256 is not the one named", Content: problem},
			"401": {Description: "Unauthorized", Content: problem},
			"403": {Description: "Your role does not allow this", Content: problem},
			"404": {Description: "No such upload session, another team's, or expired", Content: problem},
			"409": {Description: "The session is completed", Content: problem},
			"413": {Description: "The chunk, or the session's bytes, exceed the limit", Content: problem},
		},
	}
}
