package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"strings"
	"sync"

	"modelplane/artifact"
	"modelplane/auth"
	"modelplane/auth/devidp"
	"modelplane/controlplane"
	"modelplane/db"
	"modelplane/demo/docproc"
	"modelplane/demo/fraud"
	"modelplane/docs"
	"modelplane/endpoint"
	"modelplane/gguf"
	"modelplane/grant"
	"modelplane/graph"
	"modelplane/llm"
	"modelplane/quota"
	"modelplane/registry"
	"modelplane/tenant"
)

// system is the principal demo seeding acts as; the audit log names it.
var system = auth.System("modelplane-dev")

// seedDemo loads the demo teams, users, models, versions and endpoints. It is
// idempotent: what exists is left alone, so the next run keeps the data.
func seedDemo(ctx context.Context, cp *controlplane.ControlPlane, idp *devidp.IdP) error {
	for _, team := range []string{"risk", "search"} {
		if _, err := cp.Tenant.CreateTeam(ctx, system, team, strings.ToUpper(team[:1])+team[1:]); err != nil && !errors.Is(err, db.ErrConflict) {
			return err
		}
	}
	// The platform grants risk the critical tier its fraud-scoring endpoint
	// runs at, as an operator would (docs/security.md).
	if err := cp.Quotas.GrantTier(ctx, system, "risk", quota.TierCritical); err != nil {
		return err
	}
	q := db.New(cp.Pool)
	for _, u := range idp.Users() {
		row, err := q.UserUpsert(ctx, db.UserUpsertParams{Issuer: idp.Issuer(), Subject: u.Subject, Email: u.Email, Name: u.Name})
		if err != nil {
			return err
		}
		if u.PlatformRole != "" {
			role := u.PlatformRole
			if err := q.UserSetPlatformRole(ctx, db.UserSetPlatformRoleParams{ID: row.ID, PlatformRole: &role}); err != nil {
				return err
			}
		}
		if u.Team != "" {
			t, err := q.TeamGetByName(ctx, u.Team)
			if err != nil {
				return err
			}
			if _, err := q.TeamMemberUpsert(ctx, db.TeamMemberUpsertParams{TeamID: t.ID, UserID: row.ID, Role: u.TeamRole}); err != nil {
				return err
			}
		}
	}
	models, err := allDemoModels()
	if err != nil {
		return err
	}
	for _, m := range models {
		if err := seedModel(ctx, cp, m); err != nil {
			return fmt.Errorf("%s: %w", m.spec.Name, err)
		}
	}
	if err := seedGraph(ctx, cp); err != nil {
		return err
	}
	// search shares its support chat and its document processor with
	// risk, with a rate limit and a daily quota, as search's engineers
	// would (docs/sharing.md).
	limits := grant.Limits{RateLimitRPS: 20, RateLimitBurst: 40, DailyQuota: 50_000}
	if err := seedGrant(ctx, cp, "support-chat", "risk", limits); err != nil {
		return err
	}
	return seedGrant(ctx, cp, DemoGraphEndpoint, "risk", limits)
}

// seedGrant shares endpoint with team: team's keys call it, its people
// find it under "Shared with me", and chargeback by caller team charges
// it its share. A grant that exists is left alone, so the next run keeps
// the data.
func seedGrant(ctx context.Context, cp *controlplane.ControlPlane, endpoint, team string, limits grant.Limits) error {
	gs, err := cp.Grants.List(ctx, system, endpoint)
	if err != nil {
		return fmt.Errorf("demo grant of %s: %w", endpoint, err)
	}
	for _, g := range gs {
		if g.Team == team {
			return nil
		}
	}
	if _, err := cp.Grants.Set(ctx, system, endpoint, team, limits); err != nil {
		return fmt.Errorf("demo grant of %s: %w", endpoint, err)
	}
	return nil
}

// The demo's document-processor: the graph endpoint, and the team that
// owns it and its three steps (risk calls it, granted).
const (
	DemoGraphEndpoint = "document-processor"
	DemoGraphTeam     = "search"
)

// demoGraph is the document-processor's definition (docs/graphs.md): the
// tokenizer's ids feed the embedder, its embedding the classifier, whose
// probabilities the format node names by docproc.Classes.
func demoGraph(classes []string) graph.Definition {
	call := func(id, endpoint string) graph.Vertex {
		return graph.Vertex{ID: id, Type: graph.TypeCall, Endpoint: endpoint, Idempotent: true, Retries: 1}
	}
	return graph.Definition{Entry: "pipeline", Nodes: []graph.Vertex{
		{ID: "pipeline", Type: graph.TypeSequence, Steps: []string{"tokenizer", "embedder", "classifier", "formatter"}},
		call("tokenizer", "bert-tokenizer"),
		call("embedder", "bert-embedder"),
		call("classifier", "document-classifier"),
		{ID: "formatter", Type: graph.TypeFormat, Field: "probabilities", Labels: classes},
	}}
}

// seedGraph creates the document-processor graph endpoint over the three
// step endpoints seedModel made; one that exists is left alone.
func seedGraph(ctx context.Context, cp *controlplane.ControlPlane) error {
	p, err := demoDocproc()
	if err != nil {
		return err
	}
	_, err = cp.Endpoints.CreateGraph(ctx, system, endpoint.GraphSpec{Name: DemoGraphEndpoint, Team: DemoGraphTeam, Version: "v1",
		Description: "Classifies a document's text: tokenizer → BERT-style embedder → classifier → the label, its score and every class's probability.",
		Definition:  demoGraph(p.Classes),
		Settings:    endpoint.Settings{Tier: "standard", RetentionDays: 14}})
	if err != nil && !errors.Is(err, db.ErrConflict) {
		return fmt.Errorf("demo graph: %w", err)
	}
	return nil
}

type demoModel struct {
	spec     registry.ModelSpec
	versions []demoVersion
	endpoint endpoint.Spec
	// live: the endpoint serves real traffic only (no backfilled history).
	live bool
}

// The demo's real LLM: chat-assistant's CPU version and its endpoint.
const (
	DemoLLMVersion  = "v44-cpu"
	DemoLLMEndpoint = "chat-cpu"
)

// demoLLM is the demo GGUF: a bigram model over a byte-level BPE
// vocabulary, trained on the repository's own docs/*.md when a process
// first needs it (llm.TrainBigram with llm.DemoTraining: deterministic,
// about 5 s of one core) and written as a llama GGUF with F16 weights
// (llm.WriteBigram, about 0.6 MB), so chat-cpu answers in words.
var demoLLM = sync.OnceValues(func() (trainedLLM, error) {
	texts, err := demoCorpus()
	if err != nil {
		return trainedLLM{}, err
	}
	m, rep, held, err := llm.TrainBigram(texts, llm.DemoTraining)
	if err != nil {
		return trainedLLM{}, fmt.Errorf("train the demo llm: %w", err)
	}
	var b bytes.Buffer
	if err := llm.WriteBigram(&b, m, gguf.F16); err != nil {
		return trainedLLM{}, err
	}
	return trainedLLM{file: b.Bytes(), report: rep, heldOut: held}, nil
})

// trainedLLM is the demo LLM's file and what its training measured, with
// the held-out token sequences to measure it on.
type trainedLLM struct {
	file    []byte
	report  llm.TrainReport
	heldOut [][]int
}

// demoCorpus is docs/*.md in name order, the demo LLM's training text.
func demoCorpus() ([]string, error) {
	names, err := fs.Glob(docs.Markdown, "*.md")
	if err != nil {
		return nil, err
	}
	texts := make([]string, 0, len(names))
	for _, n := range names {
		b, err := fs.ReadFile(docs.Markdown, n)
		if err != nil {
			return nil, err
		}
		texts = append(texts, string(b))
	}
	return texts, nil
}

// demoVersion is a demo version and its files; nil files are a tiny
// stand-in (demoArtifact) for a version the simulated fleet serves.
type demoVersion struct {
	spec  registry.VersionSpec
	files map[string][]byte
}

func ms(v float64) *float64 { return &v }

// demoFraud is the real fraud model's two versions (package demo/fraud),
// built once per process: about a tenth of a second, the same bytes every
// time.
var demoFraud = sync.OnceValues(func() ([]fraud.Version, error) { return fraud.Versions(fraud.DefaultSeed) })

// demoDocproc is the document-processor's three models (package
// demo/docproc), built once per process: under a second, the same bytes
// every time.
var demoDocproc = sync.OnceValues(func() (docproc.Pipeline, error) { return docproc.Build(docproc.DefaultSeed) })

// docprocModels are the document-processor's steps, search's: a model, a
// version and an endpoint of one replica on the CPU nodes each, served
// by the built-in runtime's tensor loaders.
func docprocModels() ([]demoModel, error) {
	p, err := demoDocproc()
	if err != nil {
		return nil, fmt.Errorf("build the demo document-processor: %w", err)
	}
	var out []demoModel
	for _, v := range []docproc.Version{p.Tokenizer, p.Embedder, p.Classifier} {
		out = append(out, demoModel{
			spec: registry.ModelSpec{Team: DemoGraphTeam, Name: v.Model, Task: v.Task, Description: v.Description, InputSchema: v.InputSchema},
			versions: []demoVersion{{spec: registry.VersionSpec{Name: v.Name, Runtime: v.Runtime, Resources: registry.Resources{CPUCores: 1, MemoryMB: 256},
				Lineage: registry.Lineage{TrainingJob: fmt.Sprintf("docproc-seed-%d", docproc.DefaultSeed), Dataset: "demo/docproc"},
				Serving: registry.Serving{SampleInputs: v.Serving.SampleInputs}},
				files: map[string][]byte{v.File: v.Data}}},
			endpoint: endpoint.Spec{Name: v.Model, Model: v.Model, Version: v.Name,
				Settings: endpoint.Settings{InstanceProfile: endpoint.ProfileCPU, MinReplicas: 1, MaxReplicas: 1, Tier: "standard", RetentionDays: 14}},
			live: true,
		})
	}
	return out, nil
}

// demoModels are the demo's models, versions and endpoints: a real fraud
// model the CPU nodes serve with the built-in runtime (v23 XGBoost, v24 an
// ONNX model trained on shuffled labels), a simulated LLM on the GPU
// nodes, that LLM's tiny real GGUF version on the CPU nodes (chat-cpu),
// and the document-processor's three steps on the CPU nodes.
func demoModels() ([]demoModel, error) {
	fv, err := demoFraud()
	if err != nil {
		return nil, fmt.Errorf("build the demo fraud model: %w", err)
	}
	v23, v24 := fv[0], fv[1]
	cpu := registry.Resources{CPUCores: 1, MemoryMB: 512}
	trained, err := demoLLM()
	if err != nil {
		return nil, fmt.Errorf("write the demo GGUF model: %w", err)
	}
	chat := demoModel{spec: registry.ModelSpec{Team: "search", Name: "chat-assistant", Task: registry.TaskLLM,
		Description: "Support chat LLM (8B, fp16; v44 a tiny CPU GGUF).",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"messages":{"type":"array","minItems":1}},"required":["messages"]}`)}}
	return []demoModel{
		{
			spec: registry.ModelSpec{Team: "risk", Name: "fraud-detector", Task: registry.TaskClassification,
				Description:  "Card-payment fraud score.",
				InputSchema:  fraud.InputSchema(),
				OutputSchema: json.RawMessage(`{"type":"object","properties":{"score":{"type":"number"},"label":{"type":"string","enum":["legit","fraud"]}}}`),
				FeatureNames: fraud.FeatureNames()},
			versions: []demoVersion{
				{spec: registry.VersionSpec{Name: v23.Name, Runtime: v23.Runtime, Resources: cpu, SLA: registry.SLA{P99LatencyMs: ms(50)},
					Lineage: registry.Lineage{TrainingJob: "train-fraud-2311", Dataset: "payments-2026-10"}, OfflineMetrics: map[string]float64{"auc": round3(v23.AUC)},
					Serving: servingOf(v23)},
					files: map[string][]byte{v23.File: v23.Data}},
				{spec: registry.VersionSpec{Name: v24.Name, Runtime: v24.Runtime, Resources: cpu, SLA: registry.SLA{P99LatencyMs: ms(50)},
					Lineage: registry.Lineage{ParentVersion: "v23", TrainingJob: "train-fraud-2411", Dataset: "payments-2026-11"}, OfflineMetrics: map[string]float64{"auc": round3(v24.AUC)},
					Serving: servingOf(v24)},
					files: map[string][]byte{v24.File: v24.Data}},
			},
			endpoint: endpoint.Spec{Name: "fraud-scoring", Model: "fraud-detector", Version: "v23",
				Settings: endpoint.Settings{InstanceProfile: endpoint.ProfileCPU, MinReplicas: 2, MaxReplicas: 4, Tier: "critical", SamplingRate: 1, RetentionDays: 30}},
		},
		{
			spec: chat.spec,
			versions: []demoVersion{
				{spec: registry.VersionSpec{Name: "v42", Runtime: "vllm", Resources: registry.Resources{GPUCount: 1, GPUMemoryMB: 40960, GPUType: "H100-80GB"}, SLA: registry.SLA{P99TPOTMs: ms(30)},
					Lineage: registry.Lineage{TrainingJob: "sft-chat-42", Dataset: "support-dialogs-v7"},
					Sim:     json.RawMessage(`{"prefill_ms_per_token":0.05,"decode_base_ms":12,"decode_ms_per_seq":0.35,"kv_mb_per_token":0.8,"usable_gb":13}`)}},
				{spec: registry.VersionSpec{Name: "v43", Runtime: "vllm", Resources: registry.Resources{GPUCount: 1, GPUMemoryMB: 40960, GPUType: "H100-80GB"}, SLA: registry.SLA{P99TPOTMs: ms(30)},
					Lineage: registry.Lineage{ParentVersion: "v42", TrainingJob: "sft-chat-43", Dataset: "support-dialogs-v8"},
					Sim:     json.RawMessage(`{"prefill_ms_per_token":0.05,"decode_base_ms":23,"decode_ms_per_seq":0.65,"kv_mb_per_token":0.8,"usable_gb":13}`)}},
			},
			endpoint: endpoint.Spec{Name: "support-chat", Model: "chat-assistant", Version: "v42", Runtime: "vllm",
				Settings: endpoint.Settings{InstanceProfile: "mig-4g.40gb", MinReplicas: 1, MaxReplicas: 4, Tier: "standard", RetentionDays: 14}},
		},
		{
			// The same model's CPU version: a real (tiny) llama-architecture
			// GGUF that the CPU nodes serve with the built-in LLM engine,
			// on an endpoint of its own beside the simulated GPU versions.
			spec: chat.spec,
			versions: []demoVersion{
				{spec: registry.VersionSpec{Name: DemoLLMVersion, Runtime: registry.BuiltinLLM, Resources: registry.Resources{CPUCores: 1, MemoryMB: 256},
					Lineage: registry.Lineage{ParentVersion: "v42", TrainingJob: "distill-chat-44", Dataset: "support-dialogs-v8"}},
					files: map[string][]byte{"model.gguf": trained.file}},
			},
			endpoint: endpoint.Spec{Name: DemoLLMEndpoint, Model: "chat-assistant", Version: DemoLLMVersion,
				Settings: endpoint.Settings{InstanceProfile: endpoint.ProfileCPU, MinReplicas: 1, MaxReplicas: 2, Tier: "standard", RetentionDays: 14}},
			live: true,
		},
	}, nil
}

// allDemoModels are demoModels and the document-processor's steps.
func allDemoModels() ([]demoModel, error) {
	// The pipeline is built on another core while the demo LLM trains,
	// off the start's critical path; docprocModels waits for it.
	go demoDocproc()
	models, err := demoModels()
	if err != nil {
		return nil, err
	}
	steps, err := docprocModels()
	if err != nil {
		return nil, err
	}
	return append(models, steps...), nil
}

// demoOutdated reports whether the dev directory's fraud model is the
// simulated one of earlier releases (v23 an ONNX stand-in for a GPU),
// which versions being immutable cannot turn into the real one; dev then
// says how to start over.
func demoOutdated(ctx context.Context, cp *controlplane.ControlPlane) bool {
	v, err := cp.Registry.Version(ctx, system, "fraud-detector", "v23")
	return err == nil && v.Runtime != "xgboost"
}

// servingOf is the registry's serving metadata of a demo fraud version:
// its features (categories and encoding), output mapping and sample inputs.
func servingOf(v fraud.Version) registry.Serving {
	s := registry.Serving{Output: registry.ServingOutput{Classes: v.Serving.Output.Classes, Threshold: v.Serving.Output.Threshold},
		SampleInputs: v.Serving.SampleInputs}
	for _, f := range v.Serving.Features {
		s.Features = append(s.Features, registry.ServingFeature{Name: f.Name, Categories: f.Categories, Encoding: f.Encoding})
	}
	return s
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

func seedModel(ctx context.Context, cp *controlplane.ControlPlane, m demoModel) error {
	if _, err := cp.Registry.CreateModel(ctx, system, m.spec); err != nil && !errors.Is(err, db.ErrConflict) {
		return err
	}
	for _, v := range m.versions {
		if _, err := cp.Registry.Version(ctx, system, m.spec.Name, v.spec.Name); err == nil {
			continue
		}
		files := v.files
		if files == nil {
			files = demoArtifact(m.spec.Name, v.spec.Name)
		}
		manifest := map[string]string{}
		for name, b := range files {
			sum := sha256.Sum256(b)
			manifest[name] = hex.EncodeToString(sum[:])
		}
		mj, _ := json.Marshal(manifest)
		upload := func(u *artifact.Upload) error {
			for name, b := range files {
				if err := u.Add(context.Background(), name, bytes.NewReader(b)); err != nil {
					return err
				}
			}
			return nil
		}
		if _, err := cp.Registry.RegisterVersion(ctx, system, m.spec.Name, v.spec, mj, upload); err != nil {
			return err
		}
	}
	if cp.Validator != nil {
		// Validation runs in the background once the control plane starts;
		// the endpoint below needs its version validated now.
		if _, err := cp.Validator.Pass(ctx); err != nil {
			return err
		}
	}
	if _, err := cp.Endpoints.Create(ctx, system, m.endpoint); err != nil && !errors.Is(err, db.ErrConflict) {
		return err
	}
	return nil
}

// demoArtifact builds a tiny real safetensors file and a config for a demo
// version, so demo versions go through the same upload checks as any other.
func demoArtifact(model, version string) map[string][]byte {
	header := []byte(`{"weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"__metadata__":{"model":"` + model + `","version":"` + version + `"}}`)
	var st bytes.Buffer
	_ = binary.Write(&st, binary.LittleEndian, uint64(len(header)))
	st.Write(header)
	st.Write(make([]byte, 16))
	return map[string][]byte{
		"model.safetensors": st.Bytes(),
		"config.json":       []byte(`{"model":"` + model + `","version":"` + version + `"}`),
	}
}

// devKeys are the ready API keys written to dev.env, each made by a demo
// user (seedDemo's), so that what a key does is shown as that person's
// ("risk-admin@example.com via mpk_…"). Org-wide keys are a platform
// admin's to make, so the admin makes the finance key too.
var devKeys = []struct {
	env   string
	team  string
	role  auth.Role
	owner string
}{
	{"MP_ADMIN_KEY", "", auth.RolePlatformAdmin, "admin@example.com"},
	{"MP_RISK_KEY", "risk", auth.RoleAdmin, "risk-admin@example.com"},
	{"MP_SEARCH_KEY", "search", auth.RoleAdmin, "search-admin@example.com"},
	{"MP_FINANCE_KEY", "", auth.RoleFinance, "admin@example.com"},
}

// devCLIKey is the dev key MP_API_KEY repeats for the command-line client:
// the risk team's admin, who owns the demo's fraud model and endpoint.
const devCLIKey = "MP_RISK_KEY"

// writeDevEnv writes dev.env with working API keys, keeping the keys of the
// previous run when they still authenticate and have their owner (a key an
// older dev made as the system is replaced, and revoked).
func writeDevEnv(ctx context.Context, path, baseURL, natsURL, natsCreds, clickhouseURL string, cp *controlplane.ControlPlane) error {
	old := readEnvFile(path)
	var b strings.Builder
	var cliKey string
	b.WriteString("# modelplane dev credentials: source this file, then call $MP_API with a key.\n")
	fmt.Fprintf(&b, "export MP_API=%s/api/v1\nexport MP_NATS_URL=%s\nexport MP_NATS_CREDS=%s\nexport MP_CLICKHOUSE_URL=%s\n", baseURL, natsURL, natsCreds, clickhouseURL)
	q := db.New(cp.Pool)
	for _, k := range devKeys {
		key := old[k.env]
		if p, err := cp.Keys.Authenticate(ctx, key); err != nil || p == nil || p.OwnerEmail != k.owner {
			u, err := q.UserGetByEmail(ctx, k.owner)
			if err != nil {
				return fmt.Errorf("dev key %s: owner %s: %w", k.env, k.owner, err)
			}
			owner, err := auth.LoadUser(ctx, q, u.ID, "dev-seed")
			if err != nil {
				return err
			}
			raw, _, err := cp.Tenant.CreateKey(ctx, owner, tenant.KeyRequest{Name: "dev " + strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(k.env, "MP_"), "_KEY")),
				Team: k.team, Role: k.role})
			if err != nil {
				return fmt.Errorf("dev key %s: %w", k.env, err)
			}
			if p != nil { // the older key it replaces, which still works
				if _, err := cp.Tenant.RevokeKey(ctx, system, p.KeyID); err != nil {
					return fmt.Errorf("dev key %s: revoke the one it replaces: %w", k.env, err)
				}
			}
			key = raw
		}
		fmt.Fprintf(&b, "export %s=%s\n", k.env, key)
		if k.env == devCLIKey {
			cliKey = key
		}
	}
	// The command-line client reads MP_API and MP_API_KEY.
	fmt.Fprintf(&b, "export MP_API_KEY=%s\n", cliKey)
	return os.WriteFile(path, []byte(b.String()), 0o600)
}
