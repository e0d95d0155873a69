package registry_test

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"modelplane/artifact"
	"modelplane/auth"
	"modelplane/db"
	"modelplane/registry"
)

func TestRegisterVersionUpload(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	f.model(t, "llama")
	up := upload{{"model.safetensors", safetensors}, {"config/config.json", []byte(configJSON)}}
	audits := f.audits(t)
	v, err := f.svc.RegisterVersion(ctx, f.riskEng, "llama", registry.VersionSpec{Name: "v1", Runtime: "vllm",
		Resources: registry.Resources{GPUCount: 1, GPUMemoryMB: 20000, GPUType: "H100-80GB"}}, up.manifest(), up.files())
	if err != nil {
		t.Fatalf("RegisterVersion: %v", err)
	}
	wantManifest := map[string]string{"model.safetensors": digest(safetensors), "config/config.json": digest([]byte(configJSON))}
	wantSize := int64(len(safetensors) + len(configJSON))
	check := func(what string, v registry.Version) {
		t.Helper()
		if v.Name != "v1" || v.Model != "llama" || v.Format != "safetensors" || v.SizeBytes != wantSize || v.CreatedBy != f.riskEng.Name {
			t.Errorf("%s = name %q model %q format %q size %d by %q; want v1 llama safetensors %d by %s",
				what, v.Name, v.Model, v.Format, v.SizeBytes, v.CreatedBy, wantSize, f.riskEng.Name)
		}
		if !maps.Equal(v.Manifest, wantManifest) {
			t.Errorf("%s manifest = %v, want %v", what, v.Manifest, wantManifest)
		}
		if !strings.HasPrefix(v.ArtifactURI, "sha256-manifest:") {
			t.Errorf("%s artifact_uri = %q, want sha256-manifest:...", what, v.ArtifactURI)
		}
		if v.Resources.GPUType != "H100-80GB" || v.Status != "registered" {
			t.Errorf("%s resources %+v status %q, want H100-80GB registered", what, v.Resources, v.Status)
		}
	}
	check("RegisterVersion", v)
	back, err := f.svc.Version(ctx, f.riskViewer, "llama", "v1")
	if err != nil {
		t.Fatalf("Version: %v", err)
	}
	check("Version", back)
	for path, d := range wantManifest {
		if err := f.store.Verify(d); err != nil {
			t.Errorf("blob of %s: %v, want stored and intact", path, err)
		}
	}
	if got := f.audits(t) - audits; got != 1 {
		t.Errorf("audit rows written = %d, want 1", got)
	}
	var action, object string
	if err := f.pool.QueryRow(ctx, "SELECT action, object_name FROM audit_log ORDER BY id DESC LIMIT 1").Scan(&action, &object); err != nil ||
		action != "version.register" || object != "llama/v1" {
		t.Errorf("last audit row = %q %q, %v; want version.register llama/v1", action, object, err)
	}

	// The same name again, by upload or by URI, is a conflict and writes nothing.
	if _, err := f.svc.RegisterVersion(ctx, f.riskEng, "llama", registry.VersionSpec{Name: "v1", Runtime: "vllm"}, up.manifest(), up.files()); !errors.Is(err, db.ErrConflict) {
		t.Errorf("RegisterVersion(duplicate, upload) error = %v, want ErrConflict", err)
	}
	if _, err := f.svc.RegisterVersion(ctx, f.riskEng, "llama", registry.VersionSpec{Name: "v1", Runtime: "vllm", Format: "onnx", ArtifactURI: "s3://b/k"}, up.manifest(), nil); !errors.Is(err, db.ErrConflict) {
		t.Errorf("RegisterVersion(duplicate, external) error = %v, want ErrConflict", err)
	}
	if got := f.audits(t) - audits; got != 1 {
		t.Errorf("audit rows after duplicates = %d, want still 1", got)
	}
	if n := f.versions(t); n != 1 {
		t.Errorf("versions = %d, want 1", n)
	}
}

func TestRegisterVersionRejected(t *testing.T) {
	t.Parallel()
	big := []byte(strings.Repeat("token\n", 100)) // 600 bytes > MaxFileBytes
	tests := []struct {
		name     string
		manifest []byte
		files    upload
		want     error // artifact.ErrRejected or artifact.ErrTooLarge
	}{
		{name: "pickle", files: upload{{"pytorch_model.bin", pickle}}, want: artifact.ErrRejected},
		{name: "pickle among good files", files: upload{{"model.safetensors", safetensors}, {"extra.pkl", pickle}}, want: artifact.ErrRejected},
		{name: "digest mismatch", manifest: upload{{"model.safetensors", []byte("other")}}.manifest(),
			files: upload{{"model.safetensors", safetensors}}, want: artifact.ErrRejected},
		{name: "extra file", manifest: upload{{"model.safetensors", safetensors}}.manifest(),
			files: upload{{"model.safetensors", safetensors}, {"config.json", []byte(configJSON)}}, want: artifact.ErrRejected},
		{name: "missing file", manifest: upload{{"model.safetensors", safetensors}, {"config.json", []byte(configJSON)}}.manifest(),
			files: upload{{"model.safetensors", safetensors}}, want: artifact.ErrRejected},
		{name: "uploaded twice", manifest: upload{{"model.safetensors", safetensors}}.manifest(),
			files: upload{{"model.safetensors", safetensors}, {"model.safetensors", safetensors}}, want: artifact.ErrRejected},
		{name: "path escapes", manifest: upload{{"model.safetensors", safetensors}}.manifest(),
			files: upload{{"../model.safetensors", safetensors}}, want: artifact.ErrRejected},
		{name: "json that is not json", files: upload{{"config.json", []byte("{nope")}}, want: artifact.ErrRejected},
		{name: "file over the limit", files: upload{{"vocab.txt", big}}, want: artifact.ErrTooLarge},
		{name: "upload over the total limit", files: upload{{"model.safetensors", safetensors}, {"config.json", []byte(configJSON)},
			{"vocab.txt", []byte(strings.Repeat("a\n", 20))}}, want: artifact.ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			ctx := t.Context()
			f.model(t, "llama")
			audits := f.audits(t)
			man := tt.manifest
			if man == nil {
				man = tt.files.manifest()
			}
			_, err := f.svc.RegisterVersion(ctx, f.riskEng, "llama", registry.VersionSpec{Name: "v1", Runtime: "vllm"}, man, tt.files.files())
			if !errors.Is(err, tt.want) {
				t.Fatalf("RegisterVersion error = %v, want one wrapping %v", err, tt.want)
			}
			var rej *artifact.Rejection
			if !errors.As(err, &rej) || rej.Reason == "" {
				t.Errorf("RegisterVersion error = %v, want a *artifact.Rejection with a reason", err)
			}
			if !registry.IsRejected(err) && tt.want == artifact.ErrRejected {
				t.Errorf("IsRejected(%v) = false, want true", err)
			}
			if n := f.versions(t); n != 0 {
				t.Errorf("versions after rejection = %d, want 0", n)
			}
			if got := f.audits(t) - audits; got != 0 {
				t.Errorf("audit rows after rejection = %d, want 0", got)
			}
		})
	}
}

func TestRegisterVersionInvalid(t *testing.T) {
	t.Parallel()
	good := upload{{"model.safetensors", safetensors}}
	neg := -1.0
	tests := []struct {
		name     string
		p        func(f *fixture) *auth.Principal
		model    string
		spec     registry.VersionSpec
		manifest []byte
		files    registry.Files
		wantErr  error
		field    string
	}{
		{name: "viewer forbidden", p: func(f *fixture) *auth.Principal { return f.riskViewer }, spec: registry.VersionSpec{Name: "v1", Runtime: "vllm"}, files: good.files(), wantErr: auth.ErrForbidden},
		{name: "other team is not found", p: func(f *fixture) *auth.Principal { return f.searchEng }, spec: registry.VersionSpec{Name: "v1", Runtime: "vllm"}, files: good.files(), wantErr: db.ErrNotFound},
		{name: "missing model", model: "nope", spec: registry.VersionSpec{Name: "v1", Runtime: "vllm"}, files: good.files(), wantErr: db.ErrNotFound},
		{name: "bad version name", spec: registry.VersionSpec{Name: "../v1", Runtime: "vllm"}, files: good.files(), field: "metadata.name"},
		{name: "bad runtime", spec: registry.VersionSpec{Name: "v1", Runtime: "pytorch"}, files: good.files(), field: "metadata.runtime"},
		{name: "bad gpu count", spec: registry.VersionSpec{Name: "v1", Runtime: "vllm", Resources: registry.Resources{GPUCount: 17}}, files: good.files(), field: "metadata.resources.gpu_count"},
		{name: "negative cpu cores", spec: registry.VersionSpec{Name: "v1", Runtime: "xgboost", Resources: registry.Resources{CPUCores: -1}}, files: good.files(), field: "metadata.resources.cpu_cores"},
		{name: "too many cpu cores", spec: registry.VersionSpec{Name: "v1", Runtime: "xgboost", Resources: registry.Resources{CPUCores: 257}}, files: good.files(), field: "metadata.resources.cpu_cores"},
		{name: "negative memory", spec: registry.VersionSpec{Name: "v1", Runtime: "xgboost", Resources: registry.Resources{MemoryMB: -1}}, files: good.files(), field: "metadata.resources.memory_mb"},
		{name: "gpu memory without a gpu", spec: registry.VersionSpec{Name: "v1", Runtime: "xgboost", Resources: registry.Resources{GPUMemoryMB: 4096}}, files: good.files(), field: "metadata.resources.gpu_memory_mb"},
		{name: "bad gpu type", spec: registry.VersionSpec{Name: "v1", Runtime: "vllm", Resources: registry.Resources{GPUType: "T4"}}, files: good.files(), field: "metadata.resources.gpu_type"},
		{name: "negative sla", spec: registry.VersionSpec{Name: "v1", Runtime: "vllm", SLA: registry.SLA{P99LatencyMs: &neg}}, files: good.files(), field: "metadata.sla.p99_latency_ms"},
		{name: "bad parent", spec: registry.VersionSpec{Name: "v1", Runtime: "vllm", Lineage: registry.Lineage{ParentVersion: "-x"}}, files: good.files(), field: "metadata.lineage.parent_version"},
		{name: "bad manifest", spec: registry.VersionSpec{Name: "v1", Runtime: "vllm"}, manifest: []byte(`{"../x":"00"}`), files: good.files(), field: "manifest"},
		{name: "empty manifest", spec: registry.VersionSpec{Name: "v1", Runtime: "vllm"}, manifest: []byte(`{}`), files: good.files(), field: "manifest"},
		{name: "declared format differs from the files", spec: registry.VersionSpec{Name: "v1", Runtime: "vllm", Format: "onnx"}, files: good.files(), field: "metadata.format"},
		{name: "uri with files", spec: registry.VersionSpec{Name: "v1", Runtime: "vllm", ArtifactURI: "s3://b/k"}, files: good.files(), field: "metadata.artifact_uri"},
		{name: "external without uri", spec: registry.VersionSpec{Name: "v1", Runtime: "vllm", Format: "onnx"}, field: "metadata.artifact_uri"},
		{name: "external http", spec: registry.VersionSpec{Name: "v1", Runtime: "vllm", Format: "onnx", ArtifactURI: "http://host/m.onnx"}, field: "metadata.artifact_uri"},
		{name: "external file", spec: registry.VersionSpec{Name: "v1", Runtime: "vllm", Format: "onnx", ArtifactURI: "file:///etc/passwd"}, field: "metadata.artifact_uri"},
		{name: "external no scheme", spec: registry.VersionSpec{Name: "v1", Runtime: "vllm", Format: "onnx", ArtifactURI: "bucket/m.onnx"}, field: "metadata.artifact_uri"},
		{name: "external unparsable", spec: registry.VersionSpec{Name: "v1", Runtime: "vllm", Format: "onnx", ArtifactURI: "s3://b/%zz"}, field: "metadata.artifact_uri"},
		{name: "external without format", spec: registry.VersionSpec{Name: "v1", Runtime: "vllm", ArtifactURI: "s3://b/k"}, field: "metadata.format"},
		{name: "external pickle format", spec: registry.VersionSpec{Name: "v1", Runtime: "vllm", Format: "pickle", ArtifactURI: "s3://b/k"}, field: "metadata.format"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			ctx := t.Context()
			f.model(t, "llama")
			p := f.riskEng
			if tt.p != nil {
				p = tt.p(f)
			}
			model := tt.model
			if model == "" {
				model = "llama"
			}
			man := tt.manifest
			if man == nil {
				man = good.manifest()
			}
			audits := f.audits(t)
			_, err := f.svc.RegisterVersion(ctx, p, model, tt.spec, man, tt.files)
			switch {
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("RegisterVersion error = %v, want %v", err, tt.wantErr)
				}
			case !hasField(err, tt.field):
				t.Fatalf("RegisterVersion error = %v (fields %q), want a field error on %s", err, fields(err), tt.field)
			}
			if n := f.versions(t); n != 0 {
				t.Errorf("versions after refusal = %d, want 0", n)
			}
			if got := f.audits(t) - audits; got != 0 {
				t.Errorf("audit rows after refusal = %d, want 0", got)
			}
		})
	}
}

func TestRegisterVersionExternal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		uri, format string
	}{
		{"s3://models/llama/v1", "safetensors"},
		{"gs://models/llama/v1.gguf", "gguf"},
		{"https://artifacts.example.com/llama/v1.onnx", "onnx"},
		{"oci://registry.example.com/llama:v1", "safetensors"},
		{"s3://models/xgb.json", "xgboost-json"},
		{"s3://models/lgbm.txt", "lightgbm"},
	}
	f := newFixture(t)
	f.model(t, "llama")
	man := upload{{"model.safetensors", safetensors}}.manifest()
	t.Run("cases", func(t *testing.T) {
		for i, tt := range tests {
			t.Run(tt.uri, func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				name := "v" + string(rune('1'+i))
				v, err := f.svc.RegisterVersion(ctx, f.riskEng, "llama", registry.VersionSpec{Name: name, Runtime: "vllm", Format: tt.format, ArtifactURI: tt.uri}, man, nil)
				if err != nil {
					t.Fatalf("RegisterVersion(%s): %v", tt.uri, err)
				}
				back, err := f.svc.Version(ctx, f.riskViewer, "llama", name)
				if err != nil {
					t.Fatal(err)
				}
				for _, got := range []registry.Version{v, back} {
					if got.ArtifactURI != tt.uri || got.Format != tt.format || got.SizeBytes != 0 ||
						!maps.Equal(got.Manifest, map[string]string{"model.safetensors": digest(safetensors)}) {
						t.Errorf("version = uri %q format %q size %d manifest %v; want %s %s 0 and the given manifest",
							got.ArtifactURI, got.Format, got.SizeBytes, got.Manifest, tt.uri, tt.format)
					}
				}
			})
		}
	})
	if got := f.count(t, "SELECT count(*) FROM audit_log WHERE action = 'version.register'"); got != len(tests) {
		t.Errorf("version.register audit rows = %d, want %d", got, len(tests))
	}
}

func TestVersionScoping(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	f.model(t, "llama")
	v1 := f.external(t, "llama", "v1", "")
	v2 := f.external(t, "llama", "v2", "v1")
	v3 := f.external(t, "llama", "v3", "v0") // parent never registered
	v4 := f.external(t, "llama", "v4", "v2")

	tests := []struct {
		name    string
		p       *auth.Principal
		wantErr error
	}{
		{"viewer of the team", f.riskViewer, nil},
		{"platform admin", f.root, nil},
		{"other team", f.searchEng, db.ErrNotFound},
		{"no team", &auth.Principal{Name: "nobody"}, db.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := f.svc.Version(ctx, tt.p, "llama", "v1"); !errors.Is(err, tt.wantErr) {
				t.Errorf("Version error = %v, want %v", err, tt.wantErr)
			}
			vs, err := f.svc.Versions(ctx, tt.p, "llama", 0, 10)
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("Versions error = %v, want %v", err, tt.wantErr)
			}
			if err == nil && len(vs) != 4 {
				t.Errorf("Versions = %d, want 4", len(vs))
			}
			_, all, edges, err := f.svc.LineageOf(ctx, tt.p, "llama")
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("LineageOf error = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			want := []registry.LineageEdge{{Parent: "v1", Child: "v2"}, {Parent: "v2", Child: "v4"}}
			if len(all) != 4 || len(edges) != len(want) || edges[0] != want[0] || edges[1] != want[1] {
				t.Errorf("LineageOf = %d versions, edges %v; want 4 and %v", len(all), edges, want)
			}
		})
	}
	if _, err := f.svc.Version(ctx, f.riskViewer, "llama", "v9"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("Version(missing) error = %v, want ErrNotFound", err)
	}
	page1, err := f.svc.Versions(ctx, f.riskViewer, "llama", 0, 2)
	if err != nil || len(page1) != 2 || page1[0].ID != v1.ID || page1[1].ID != v2.ID {
		t.Fatalf("Versions page 1 = %d, %v; want v1, v2", len(page1), err)
	}
	page2, err := f.svc.Versions(ctx, f.riskViewer, "llama", page1[1].ID, 2)
	if err != nil || len(page2) != 2 || page2[0].ID != v3.ID || page2[1].ID != v4.ID {
		t.Errorf("Versions page 2 = %d, %v; want v3, v4", len(page2), err)
	}
}

// TestRegisterVersionNeedsModelFile: an upload of configs alone (JSON, text)
// holds no model to serve. artifact.Result leaves that decision to the
// caller; the registry must make it, as it does for external artifacts,
// whose format must be a model format.
func TestRegisterVersionNeedsModelFile(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.model(t, "llama")
	up := upload{{"config.json", []byte(configJSON)}, {"vocab.txt", []byte("a\nb\n")}}
	v, err := f.svc.RegisterVersion(t.Context(), f.riskEng, "llama", registry.VersionSpec{Name: "v1", Runtime: "vllm"}, up.manifest(), up.files())
	if err == nil {
		t.Errorf("RegisterVersion(configs only) = format %q, no error; want it refused", v.Format)
	}
	if n := f.versions(t); n != 0 {
		t.Errorf("versions = %d, want 0", n)
	}
}
