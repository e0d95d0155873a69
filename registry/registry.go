// Package registry owns models and their immutable, checksummed versions.
// Uploaded files go through package artifact (content inspection, manifest
// check, content-addressed store) before a version row exists; a version is
// written with its audit record in one transaction and never changes after.
// Lookups are scoped to the caller's teams in SQL.
package registry

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/coder/quartz"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"modelplane/artifact"
	"modelplane/audit"
	"modelplane/auth"
	"modelplane/db"
	"modelplane/egress"
	"modelplane/field"
	"modelplane/sim/profile"
)

// Tasks a model can perform.
const (
	TaskClassification = "classification"
	TaskRegression     = "regression"
	TaskLLM            = "llm"
)

// Runtimes a version can be served by. llamacpp is llama.cpp's
// llama-server; builtin-llm is the built-in runtime's LLM engine for GGUF
// models on CPU (docs/llm-runtimes.md).
var Runtimes = []string{"vllm", "triton", "onnxruntime", "tensorrt-llm", "xgboost", "lightgbm", "llamacpp", BuiltinLLM, Tokenizer, "sim"}

// BuiltinLLM is the registry runtime of the built-in runtime's LLM engine.
const BuiltinLLM = "builtin-llm"

// Tokenizer is the registry runtime, and the format, of the built-in
// runtime's tokenizer: a version of it holds a Hugging Face tokenizer.json
// (a JSON file, which no content check tells from other JSON, so the
// runtime names the format) and turns text into token ids.
const Tokenizer = "tokenizer"

// Model is a named model owned by one team.
type Model struct {
	ID           int64           `json:"-"`
	TeamID       int64           `json:"-"`
	Name         string          `json:"name"`
	Team         string          `json:"team"`
	Task         string          `json:"task"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	OutputSchema json.RawMessage `json:"output_schema"`
	FeatureNames []string        `json:"feature_names"`
	CreatedBy    string          `json:"created_by"`
	CreatedAt    time.Time       `json:"created_at"`
	Versions     int64           `json:"version_count"`
}

// ModelSpec is what a caller gives to create a model.
type ModelSpec struct {
	Team         string
	Name         string
	Task         string
	Description  string
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage
	FeatureNames []string
}

// Service manages models and versions.
type Service struct {
	pool  *pgxpool.Pool
	store *artifact.Store
	max   artifact.Limits
	// egress is the operator's allow-list for https:// artifact URIs;
	// nil allows none.
	egress *egress.Policy
	// validate is set when a validator runs: versions it can run are
	// queued for validation at registration, and it is woken.
	validate func()
	// clock is what upload sessions expire on (nil: the real clock).
	clock quartz.Clock
}

// WithValidation makes registration queue the versions the control plane
// can run itself (built-in runtime, uploaded files, no GPU) for the
// validator, which must then run; wake is called after such a version is
// registered. It returns s.
func (s *Service) WithValidation(wake func()) *Service {
	s.validate = wake
	return s
}

// WithEgress sets the egress allow-list that https:// artifact URIs must
// pass (host on the list, not an internal address); without one, https://
// URIs are refused. It returns s.
func (s *Service) WithEgress(p *egress.Policy) *Service {
	s.egress = p
	return s
}

// New returns a registry service storing uploads in store.
func New(pool *pgxpool.Pool, store *artifact.Store, limits artifact.Limits) *Service {
	return &Service{pool: pool, store: store, max: limits}
}

// refusingLoader is the compiler's only way to fetch a document a schema
// refers to, and it fetches none: the library's default loader opens any
// file: URL on the control plane's disk, which let a model's schema read
// server files and learn from the error whether they exist and what they
// start with. It records that it was asked, so that checkSchema answers with
// one message whatever the target was. The well-known meta-schemas are
// built into the compiler and never reach it.
type refusingLoader struct{ asked bool }

func (l *refusingLoader) Load(string) (any, error) {
	l.asked = true
	return nil, errExternalRef
}

// errExternalRef is why a schema that refers outside itself is refused.
var errExternalRef = errors.New("external references are not allowed")

// checkSchema reports whether raw is empty or a JSON Schema that compiles
// without anything but itself: references within the document ("#/$defs/x",
// anchors) work, any other ($ref, $schema or $id-relative) is refused with
// the same message, which names neither the target nor what loading it
// would have found.
func checkSchema(errs *field.Errors, field string, raw json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return json.RawMessage(`{}`)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		errs.Add(field, "is not valid JSON: %v", err)
		return nil
	}
	loader := &refusingLoader{}
	c := jsonschema.NewCompiler()
	c.UseLoader(loader)
	if err := c.AddResource("mem://schema.json", doc); err != nil {
		errs.Add(field, "is not a valid JSON Schema: %v", err)
		return nil
	}
	if _, err := c.Compile("mem://schema.json"); err != nil {
		if loader.asked {
			errs.Add(field, "%s", errExternalRef.Error())
		} else {
			errs.Add(field, "is not a valid JSON Schema: %v", err)
		}
		return nil
	}
	return raw
}

// CreateModel creates a model in one of the caller's teams.
func (s *Service) CreateModel(ctx context.Context, p *auth.Principal, spec ModelSpec) (Model, error) {
	var errs field.Errors
	field.Name(&errs, "name", spec.Name)
	field.OneOf(&errs, "task", spec.Task, TaskClassification, TaskRegression, TaskLLM)
	if len(spec.Description) > 2000 {
		errs.Add("description", "must be at most 2000 characters")
	}
	in := checkSchema(&errs, "input_schema", spec.InputSchema)
	out := checkSchema(&errs, "output_schema", spec.OutputSchema)
	seen := map[string]bool{}
	for i, f := range spec.FeatureNames {
		if f == "" || len(f) > 200 || seen[f] {
			errs.Add(fmt.Sprintf("feature_names[%d]", i), "must be a unique non-empty name of at most 200 characters")
		}
		seen[f] = true
	}
	m, ok := p.Membership(spec.Team)
	if spec.Team == "" {
		if len(p.Teams) == 1 {
			m, ok = p.Teams[0], true
		} else {
			errs.Add("team", "is required")
		}
	}
	if err := errs.Err(); err != nil {
		return Model{}, err
	}
	q := db.New(s.pool)
	if !ok && p.PlatformAdmin() {
		t, err := q.TeamGetByName(ctx, spec.Team)
		if err != nil {
			return Model{}, fmt.Errorf("team %s: %w", spec.Team, err)
		}
		m, ok = auth.Membership{TeamID: t.ID, Team: t.Name, Role: auth.RoleAdmin}, true
	}
	if !ok {
		return Model{}, fmt.Errorf("team %s: %w", spec.Team, db.ErrNotFound)
	}
	if !p.CanWrite(m.TeamID) {
		return Model{}, auth.ErrForbidden
	}
	if spec.FeatureNames == nil {
		spec.FeatureNames = []string{}
	}
	var res Model
	err := db.InTx(ctx, s.pool, func(q *db.Queries) error {
		row, err := q.ModelCreate(ctx, db.ModelCreateParams{TeamID: m.TeamID, Name: spec.Name, Task: spec.Task,
			Description: spec.Description, InputSchema: in, OutputSchema: out, FeatureNames: spec.FeatureNames, CreatedBy: p.Who(), CreatedByUserID: p.ActorUserID(), CreatedByKeyID: p.ActorKeyID()})
		if err != nil {
			return err
		}
		res = Model{ID: row.ID, TeamID: row.TeamID, Name: row.Name, Team: m.Team, Task: row.Task, Description: row.Description,
			InputSchema: row.InputSchema, OutputSchema: row.OutputSchema, FeatureNames: row.FeatureNames, CreatedBy: row.CreatedBy, CreatedAt: row.CreatedAt}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &m.TeamID, Action: "model.create", ObjectType: "model", ObjectName: spec.Name, After: res})
	})
	if err != nil {
		return Model{}, fmt.Errorf("create model: %w", err)
	}
	return res, nil
}

func modelOf(r db.ModelGetRow) Model {
	return Model{ID: r.ID, TeamID: r.TeamID, Name: r.Name, Team: r.TeamName, Task: r.Task, Description: r.Description,
		InputSchema: r.InputSchema, OutputSchema: r.OutputSchema, FeatureNames: r.FeatureNames, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt}
}

// Model returns a model visible to the caller.
func (s *Service) Model(ctx context.Context, p *auth.Principal, name string) (Model, error) {
	all, ids := p.Scope()
	r, err := db.New(s.pool).ModelGet(ctx, db.ModelGetParams{Name: name, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return Model{}, fmt.Errorf("model %s: %w", name, err)
	}
	return modelOf(r), nil
}

// Models lists the models visible to the caller, after the given id.
func (s *Service) Models(ctx context.Context, p *auth.Principal, afterID int64, limit int) ([]Model, error) {
	all, ids := p.Scope()
	rows, err := db.New(s.pool).ModelList(ctx, db.ModelListParams{AllTeams: all, TeamIDs: ids, AfterID: afterID, Lim: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	out := make([]Model, len(rows))
	for i, r := range rows {
		out[i] = Model{ID: r.ID, TeamID: r.TeamID, Name: r.Name, Team: r.TeamName, Task: r.Task, Description: r.Description,
			InputSchema: r.InputSchema, OutputSchema: r.OutputSchema, FeatureNames: r.FeatureNames, CreatedBy: r.CreatedBy,
			CreatedAt: r.CreatedAt, Versions: r.VersionCount}
	}
	return out, nil
}

// Resources is what one replica of a version needs. A version with
// GPUCount 0 runs on a CPU node: it is placed by CPUCores and MemoryMB,
// never on a GPU. Cores are whole cores, given to one replica only (the
// process driver pins them), as whole GPUs and MIG slices are; they are
// metered and priced per core-second. A CPU version that states neither
// gets DefaultCPUCores and DefaultMemoryMB at registration, except the
// memory of an uploaded GGUF model the control plane validates: that is
// computed from the file (Version.MemoryNeedMB) and stays 0 here. On a GPU
// version CPUCores and MemoryMB are recorded but not placed by: a GPU
// node's host CPUs come with its GPUs.
type Resources struct {
	GPUCount    int32  `json:"gpu_count" required:"false" doc:"GPUs one replica needs; 0 (the default) serves it on CPU nodes."`
	GPUMemoryMB int32  `json:"gpu_memory_mb" required:"false"`
	GPUType     string `json:"gpu_type,omitempty"`
	// CPUCores is the whole CPU cores one replica needs.
	CPUCores int32 `json:"cpu_cores" required:"false" doc:"Whole CPU cores one replica needs; 0 is 1 on a CPU version."`
	// MemoryMB is the host memory one replica needs, in MiB. A GGUF
	// version may leave it 0: its need is computed from the file.
	MemoryMB int32 `json:"memory_mb" required:"false" doc:"Host memory one replica needs, in MiB; 0 is 1024 on a CPU version (a GGUF version's need is computed)."`
}

// The size of a CPU version that states none, and the bounds of what one
// may state: no CPU node offers more than MaxCPUCores cores or
// MaxMemoryMB of memory to one replica.
const (
	DefaultCPUCores = 1
	DefaultMemoryMB = 1024
	MaxCPUCores     = 256
	MaxMemoryMB     = 4 * 1024 * 1024
)

// CPU returns the cores and memory a replica of a version with these
// resources is placed by: the stated ones, or the defaults for what a
// version needing no GPU left at 0 (rows registered before CPU nodes
// existed hold 0).
func (r Resources) CPU() (cores, memoryMB int32) {
	cores, memoryMB = r.CPUCores, r.MemoryMB
	if r.GPUCount == 0 {
		if cores == 0 {
			cores = DefaultCPUCores
		}
		if memoryMB == 0 {
			memoryMB = DefaultMemoryMB
		}
	}
	return cores, memoryMB
}

// CPUNeeding is CPU for a version whose files need needMB of memory to
// run (a GGUF model's, computed at validation; 0 when not computed): the
// memory is the larger of the stated and the need, the need alone when
// none is stated. A version is placed by what its file needs, whatever it
// declared.
func (r Resources) CPUNeeding(needMB int32) (cores, memoryMB int32) {
	if r.GPUCount == 0 && r.MemoryMB == 0 && needMB > 0 {
		r.MemoryMB = needMB
	}
	cores, memoryMB = r.CPU()
	if r.GPUCount == 0 {
		memoryMB = max(memoryMB, needMB)
	}
	return cores, memoryMB
}

// SLA is the version's latency objective; the rollout judge holds it to it.
type SLA struct {
	P99LatencyMs *float64 `json:"p99_latency_ms,omitempty"`
	P99TPOTMs    *float64 `json:"p99_tpot_ms,omitempty"`
}

// Lineage says where a version came from.
type Lineage struct {
	ParentVersion string `json:"parent_version,omitempty"`
	TrainingJob   string `json:"training_job,omitempty"`
	Dataset       string `json:"dataset,omitempty"`
}

// VersionSpec is a version's metadata as registered.
type VersionSpec struct {
	Name           string             `json:"name"`
	Format         string             `json:"format,omitempty"`
	Runtime        string             `json:"runtime"`
	ArtifactURI    string             `json:"artifact_uri,omitempty"`
	Resources      Resources          `json:"resources" required:"false"`
	SLA            SLA                `json:"sla" required:"false"`
	Lineage        Lineage            `json:"lineage" required:"false"`
	OfflineMetrics map[string]float64 `json:"offline_metrics,omitempty"`
	Sim            json.RawMessage    `json:"sim,omitempty"`
	// Serving says how the built-in runtime reads instances and maps
	// outputs (features, output, sample_inputs).
	Serving Serving `json:"serving" required:"false"`
}

// Version is a registered, immutable model version.
type Version struct {
	VersionSpec
	Model     string            `json:"model"`
	Manifest  map[string]string `json:"manifest"`
	SizeBytes int64             `json:"size_bytes"`
	Status    string            `json:"status"`
	// Validation is the outcome of validation at registration; nil for a
	// version the control plane does not run itself.
	Validation *Validation `json:"validation,omitempty"`
	// MemoryNeedMB is what a GGUF version's file needs to run on the
	// built-in LLM engine, in MiB (weights as float32 and the default K/V
	// cache), computed at validation; 0 until then and for other versions.
	// A replica is placed with the larger of it and Resources.MemoryMB.
	MemoryNeedMB int32     `json:"memory_need_mb,omitempty"`
	CreatedBy    string    `json:"created_by"`
	CreatedAt    time.Time `json:"created_at"`
	ID           int64     `json:"-"`
}

// Files streams a version's uploaded files into u: each file with its
// manifest path (u.Add), or tar archives whose entries are checked like files
// (u.AddTar). It returns the first error. Uploads are never held in memory.
type Files func(u *artifact.Upload) error

// Formats a version may declare when its artifact lives elsewhere.
var externalFormats = []string{"safetensors", "onnx", "gguf", "xgboost-json", "lightgbm"}

func (s *Service) checkSpec(errs *field.Errors, spec *VersionSpec, m Model) {
	checkServing(errs, &spec.Serving, m)
	if spec.Serving.LLM != nil {
		checkLLM(errs, spec.Serving.LLM, int(spec.Resources.GPUCount))
	}
	field.VersionName(errs, "metadata.name", spec.Name)
	field.OneOf(errs, "metadata.runtime", spec.Runtime, Runtimes...)
	r := spec.Resources
	if r.GPUCount < 0 || r.GPUCount > 16 {
		errs.Add("metadata.resources.gpu_count", "must be between 0 and 16")
	}
	if r.GPUMemoryMB < 0 || r.GPUMemoryMB > 16*80*1024 {
		errs.Add("metadata.resources.gpu_memory_mb", "must be between 0 and %d", 16*80*1024)
	}
	if r.GPUType != "" {
		field.OneOf(errs, "metadata.resources.gpu_type", r.GPUType, "A100-80GB", "H100-80GB")
		if r.GPUCount == 0 {
			errs.Add("metadata.resources.gpu_type", "needs gpu_count of at least 1; a version with gpu_count 0 runs on CPU nodes")
		}
	}
	if r.GPUCount == 0 && r.GPUMemoryMB != 0 {
		errs.Add("metadata.resources.gpu_memory_mb", "needs gpu_count of at least 1; a version with gpu_count 0 runs on CPU nodes")
	}
	if r.CPUCores < 0 || r.CPUCores > MaxCPUCores {
		errs.Add("metadata.resources.cpu_cores", "must be a whole number of cores between 0 (the default, %d) and %d", DefaultCPUCores, MaxCPUCores)
	}
	if r.MemoryMB < 0 || r.MemoryMB > MaxMemoryMB {
		errs.Add("metadata.resources.memory_mb", "must be between 0 (the default, %d) and %d MiB", DefaultMemoryMB, MaxMemoryMB)
	}
	if r.GPUCount == 0 && errs.Err() == nil {
		// What is shown is what is placed: the defaults are stored (the
		// memory once the files' format is known, in RegisterVersion).
		spec.Resources.CPUCores, _ = r.CPU()
	}
	for name, v := range map[string]*float64{"p99_latency_ms": spec.SLA.P99LatencyMs, "p99_tpot_ms": spec.SLA.P99TPOTMs} {
		if v != nil && !(*v > 0 && *v < 3_600_000) {
			errs.Add("metadata.sla."+name, "must be a positive number of milliseconds")
		}
	}
	if spec.Lineage.ParentVersion != "" {
		field.VersionName(errs, "metadata.lineage.parent_version", spec.Lineage.ParentVersion)
	}
	if len(spec.Sim) > 0 {
		if !json.Valid(spec.Sim) || bytes.TrimSpace(spec.Sim)[0] != '{' {
			errs.Add("metadata.sim", "must be a JSON object")
		} else if _, err := profile.Parse(spec.Sim); err != nil {
			errs.Add("metadata.sim", "%s", strings.TrimPrefix(err.Error(), profile.ErrInvalid.Error()+": "))
		}
	}
}

// RegisterVersion registers a version of a model from uploaded files checked
// against manifest, or from an external artifact URI (files nil) whose
// manifest is recorded as given. When a registration with files fails, at
// whatever step, the blobs its upload wrote that no version references are
// removed from the store.
func (s *Service) RegisterVersion(ctx context.Context, p *auth.Principal, model string, spec VersionSpec, manifest []byte, files Files) (_ Version, err error) {
	m, err := s.Model(ctx, p, model)
	if err != nil {
		return Version{}, err
	}
	if !p.CanWrite(m.TeamID) {
		return Version{}, auth.ErrForbidden
	}
	if m.Task == "graph" {
		// A graph's versions are definitions, saved through its endpoint
		// (endpoint.AddGraphVersion), never artifacts.
		return Version{}, field.Errors{{Field: "model", Message: "is a graph's model: save a version with POST /endpoints/" + model + "/graph/versions"}}
	}
	var errs field.Errors
	s.checkSpec(&errs, &spec, m)
	man, err := artifact.ParseManifest(manifest)
	if err != nil {
		errs.Add("manifest", "%s", strings.TrimPrefix(err.Error(), artifact.ErrRejected.Error()+": "))
	} else {
		checkDraftModel(&errs, spec.Serving.LLM, man)
	}
	if files == nil {
		u, err := url.Parse(spec.ArtifactURI)
		if spec.ArtifactURI == "" || err != nil || u.Scheme == "" || !(u.Scheme == "s3" || u.Scheme == "gs" || u.Scheme == "https" || u.Scheme == "oci") {
			errs.Add("metadata.artifact_uri", "is required without uploaded files and must be an s3://, gs://, oci:// or https:// URI")
		} else if u.Scheme == "https" {
			if err := s.egress.CheckURL(spec.ArtifactURI); err != nil {
				errs.Add("metadata.artifact_uri", "%s", strings.TrimPrefix(err.Error(), egress.ErrRefused.Error()+": "))
			}
		}
		field.OneOf(&errs, "metadata.format", spec.Format, externalFormats...)
	} else if spec.ArtifactURI != "" {
		errs.Add("metadata.artifact_uri", "must be empty when files are uploaded")
	}
	if err := errs.Err(); err != nil {
		return Version{}, err
	}
	q := db.New(s.pool)
	all, ids := p.Scope()
	if _, err := q.ModelVersionGet(ctx, db.ModelVersionGetParams{ModelID: m.ID, Name: spec.Name, AllTeams: all, TeamIDs: ids}); err == nil {
		return Version{}, fmt.Errorf("version %s of %s: %w", spec.Name, model, db.ErrConflict)
	}
	var size int64
	if files != nil {
		up := artifact.NewUpload(s.store, man, s.max)
		defer func() { err = s.endUpload(ctx, up, err) }()
		res, err := s.upload(up, files)
		if err != nil {
			return Version{}, err
		}
		if spec.Runtime == Tokenizer {
			if res.Format != artifact.FormatJSON {
				return Version{}, field.Errors{{Field: "files", Message: "a tokenizer version holds a tokenizer.json and no model file"}}
			}
			res.Format = Tokenizer
		}
		if !res.Format.IsModel() && res.Format != Tokenizer {
			return Version{}, field.Errors{{Field: "files", Message: "hold no model file: upload safetensors, ONNX, GGUF, XGBoost JSON or a LightGBM model"}}
		}
		if spec.Format != "" && spec.Format != string(res.Format) {
			return Version{}, field.Errors{{Field: "metadata.format", Message: fmt.Sprintf("says %s but the files hold %s", spec.Format, res.Format)}}
		}
		spec.Format, spec.ArtifactURI, size = string(res.Format), res.URI, res.Size
	}
	manJSON, _ := json.Marshal(man)
	metrics, _ := json.Marshal(spec.OfflineMetrics)
	if spec.OfflineMetrics == nil {
		metrics = []byte(`{}`)
	}
	var sim []byte
	if len(spec.Sim) > 0 {
		sim = spec.Sim
	}
	serving, err := json.Marshal(spec.Serving)
	if err != nil {
		return Version{}, fmt.Errorf("register version: %w", err)
	}
	queue := s.validate != nil && validatable(spec, files != nil)
	if spec.Resources.GPUCount == 0 && spec.Resources.MemoryMB == 0 && !(queue && spec.Format == string(artifact.FormatGGUF)) {
		// A GGUF model validation runs keeps 0: its need is computed from
		// the file and placed by (Resources.CPUNeeding).
		spec.Resources.MemoryMB = DefaultMemoryMB
	}
	var out Version
	err = db.InTx(ctx, s.pool, func(q *db.Queries) error {
		row, err := q.ModelVersionCreate(ctx, db.ModelVersionCreateParams{ModelID: m.ID, TeamID: m.TeamID, Name: spec.Name,
			Format: spec.Format, Runtime: spec.Runtime, ArtifactURI: spec.ArtifactURI, Manifest: manJSON, SizeBytes: size,
			GPUCount: spec.Resources.GPUCount, GPUMemoryMB: spec.Resources.GPUMemoryMB, GPUType: spec.Resources.GPUType,
			CPUCores: spec.Resources.CPUCores, MemoryMB: spec.Resources.MemoryMB,
			P99LatencyMs: spec.SLA.P99LatencyMs, P99TPOTMs: spec.SLA.P99TPOTMs, ParentVersion: spec.Lineage.ParentVersion,
			TrainingJob: spec.Lineage.TrainingJob, Dataset: spec.Lineage.Dataset, OfflineMetrics: metrics, SimProfile: sim,
			CreatedBy: p.Who(), CreatedByUserID: p.ActorUserID(), CreatedByKeyID: p.ActorKeyID(), Serving: serving})
		if err != nil {
			return err
		}
		out = versionOf(row, model)
		if queue {
			if err := q.ValidationCreate(ctx, db.ValidationCreateParams{VersionID: row.ID, TeamID: m.TeamID}); err != nil {
				return err
			}
			out.Validation = &Validation{State: ValidationPending}
		}
		return audit.Record(ctx, q, p, audit.Entry{TeamID: &m.TeamID, Action: "version.register", ObjectType: "model_version",
			ObjectName: model + "/" + spec.Name, After: out})
	})
	if err != nil {
		return Version{}, fmt.Errorf("register version: %w", err)
	}
	if files != nil {
		// The version is recorded: a failure here fails nothing, since
		// Artifact stores a missing manifest when an agent first asks.
		_ = s.putManifest(ctx, man)
	}
	if queue {
		s.validate()
	}
	return out, nil
}

func (s *Service) upload(up *artifact.Upload, files Files) (artifact.Result, error) {
	if err := files(up); err != nil {
		return artifact.Result{}, err
	}
	return up.Finish()
}

// cleanupTimeout bounds removing the blobs of a failed upload, which runs
// even when the request that made it is gone.
const cleanupTimeout = 30 * time.Second

// endUpload ends up after the registration it belongs to returned err: the
// version now references its blobs, or they are removed unless another
// version references them. A failure to remove is joined to err; the blobs
// stay, which is safe.
func (s *Service) endUpload(ctx context.Context, up *artifact.Upload, err error) error {
	if err == nil {
		up.Release()
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if derr := up.Discard(ctx, s.digestsInUse); derr != nil {
		return errors.Join(err, derr)
	}
	return err
}

// digestsInUse answers artifact.InUse from the manifests of every version,
// of every team: the blob store is shared, and a blob goes only when no
// version lists it.
func (s *Service) digestsInUse(ctx context.Context, digests []string) (map[string]bool, error) {
	rows, err := db.New(s.pool).ModelVersionDigestsInUse(ctx, digests)
	if err != nil {
		return nil, fmt.Errorf("blobs in use: %w", err)
	}
	used := make(map[string]bool, len(rows))
	for _, d := range rows {
		used[d] = true
	}
	return used, nil
}

func versionOf(r db.ModelVersion, model string) Version {
	v := Version{ID: r.ID, Model: model, SizeBytes: r.SizeBytes, Status: r.Status, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt,
		MemoryNeedMB: r.MemoryNeedMB}
	v.Name, v.Format, v.Runtime, v.ArtifactURI = r.Name, r.Format, r.Runtime, r.ArtifactURI
	v.Resources = Resources{GPUCount: r.GPUCount, GPUMemoryMB: r.GPUMemoryMB, GPUType: r.GPUType, CPUCores: r.CPUCores, MemoryMB: r.MemoryMB}
	v.SLA = SLA{P99LatencyMs: r.P99LatencyMs, P99TPOTMs: r.P99TPOTMs}
	v.Lineage = Lineage{ParentVersion: r.ParentVersion, TrainingJob: r.TrainingJob, Dataset: r.Dataset}
	_ = json.Unmarshal(r.OfflineMetrics, &v.OfflineMetrics)
	_ = json.Unmarshal(r.Manifest, &v.Manifest)
	if len(r.SimProfile) > 0 {
		v.Sim = r.SimProfile
	}
	_ = json.Unmarshal(r.Serving, &v.Serving)
	return v
}

// withValidations fills in the validations of vs, in one query.
func (s *Service) withValidations(ctx context.Context, p *auth.Principal, vs []Version) error {
	if len(vs) == 0 {
		return nil
	}
	ids := make([]int64, len(vs))
	for i, v := range vs {
		ids[i] = v.ID
	}
	all, teams := p.Scope()
	rows, err := db.New(s.pool).ValidationListByVersions(ctx, db.ValidationListByVersionsParams{VersionIDs: ids, AllTeams: all, TeamIDs: teams})
	if err != nil {
		return fmt.Errorf("validations: %w", err)
	}
	by := make(map[int64]*Validation, len(rows))
	for _, r := range rows {
		by[r.VersionID] = validationOf(r)
	}
	for i := range vs {
		vs[i].Validation = by[vs[i].ID]
	}
	return nil
}

// Version returns one version of a model visible to the caller.
func (s *Service) Version(ctx context.Context, p *auth.Principal, model, name string) (Version, error) {
	m, err := s.Model(ctx, p, model)
	if err != nil {
		return Version{}, err
	}
	all, ids := p.Scope()
	r, err := db.New(s.pool).ModelVersionGet(ctx, db.ModelVersionGetParams{ModelID: m.ID, Name: name, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return Version{}, fmt.Errorf("version %s of %s: %w", name, model, err)
	}
	vs := []Version{versionOf(r, model)}
	if err := s.withValidations(ctx, p, vs); err != nil {
		return Version{}, err
	}
	return vs[0], nil
}

// Versions lists a model's versions after the given id.
func (s *Service) Versions(ctx context.Context, p *auth.Principal, model string, afterID int64, limit int) ([]Version, error) {
	all, ids := p.Scope()
	rows, err := db.New(s.pool).ModelVersionListByModelName(ctx, db.ModelVersionListByModelNameParams{ModelName: model, AllTeams: all, TeamIDs: ids, AfterID: afterID, Lim: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list versions: %w", err)
	}
	if len(rows) == 0 {
		// An empty page: the model may have no (more) versions, or not be
		// visible at all, which is a 404.
		if _, err := s.Model(ctx, p, model); err != nil {
			return nil, err
		}
	}
	out := make([]Version, len(rows))
	for i, r := range rows {
		out[i] = versionOf(r, model)
	}
	if err := s.withValidations(ctx, p, out); err != nil {
		return nil, err
	}
	return out, nil
}

// VersionNames lists the names of a model's versions, oldest first, for a
// model the caller already loaded (an endpoint's).
func (s *Service) VersionNames(ctx context.Context, p *auth.Principal, modelID int64) ([]string, error) {
	all, ids := p.Scope()
	rows, err := db.New(s.pool).ModelVersionListAllByModel(ctx, db.ModelVersionListAllByModelParams{ModelID: modelID, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return nil, fmt.Errorf("list versions: %w", err)
	}
	names := make([]string, len(rows))
	for i, r := range rows {
		names[i] = r.Name
	}
	return names, nil
}

// Unroutables says, for each of the model's versions that may not take
// traffic or be rolled out now on an endpoint where the versions named
// serving take traffic, why (Unroutable's and Unfit's reasons), so forms
// can offer only the others; a version missing from it may.
func (s *Service) Unroutables(ctx context.Context, p *auth.Principal, modelID int64, serving []string) (map[string]string, error) {
	all, ids := p.Scope()
	q := db.New(s.pool)
	rows, err := q.ModelVersionListAllByModel(ctx, db.ModelVersionListAllByModelParams{ModelID: modelID, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return nil, fmt.Errorf("list versions: %w", err)
	}
	// One query for every version's validation, not one a version: the
	// endpoint page calls this on each view (modelplane bench api).
	vids := make([]int64, len(rows))
	var on []db.ModelVersion
	for i, r := range rows {
		vids[i] = r.ID
		if slices.Contains(serving, r.Name) {
			on = append(on, r)
		}
	}
	xs, err := q.ValidationListByVersions(ctx, db.ValidationListByVersionsParams{VersionIDs: vids, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return nil, fmt.Errorf("list validations: %w", err)
	}
	byVersion := make(map[int64]*db.ModelVersionValidation, len(xs))
	for i := range xs {
		byVersion[xs[i].VersionID] = &xs[i]
	}
	out := map[string]string{}
	for _, r := range rows {
		if why := cmp.Or(unroutable(r, byVersion[r.ID]), Unfit(r, on)); why != "" {
			out[r.Name] = why
		}
	}
	return out, nil
}

// LineageEdge links a version to its parent for the lineage graph.
type LineageEdge struct{ Parent, Child string }

// LineageOf returns a model with all its versions, oldest first, and the
// edges among them whose parent is also registered: everything a model page
// shows, in two queries.
func (s *Service) LineageOf(ctx context.Context, p *auth.Principal, model string) (Model, []Version, []LineageEdge, error) {
	m, err := s.Model(ctx, p, model)
	if err != nil {
		return Model{}, nil, nil, err
	}
	all, ids := p.Scope()
	rows, err := db.New(s.pool).ModelVersionListAllByModel(ctx, db.ModelVersionListAllByModelParams{ModelID: m.ID, AllTeams: all, TeamIDs: ids})
	if err != nil {
		return Model{}, nil, nil, fmt.Errorf("lineage: %w", err)
	}
	vs := make([]Version, len(rows))
	known := map[string]bool{}
	for i, r := range rows {
		vs[i] = versionOf(r, model)
		known[r.Name] = true
	}
	if err := s.withValidations(ctx, p, vs); err != nil {
		return Model{}, nil, nil, err
	}
	var edges []LineageEdge
	for _, v := range vs {
		if v.Lineage.ParentVersion != "" && known[v.Lineage.ParentVersion] {
			edges = append(edges, LineageEdge{Parent: v.Lineage.ParentVersion, Child: v.Name})
		}
	}
	return m, vs, edges, nil
}

// IsRejected reports whether err is an artifact rejection (bad content,
// manifest mismatch) rather than a server fault.
func IsRejected(err error) bool { return errors.Is(err, artifact.ErrRejected) }
