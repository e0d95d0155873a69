package fleet

import (
	"encoding/json"

	"modelplane/agent/proto"
	"modelplane/artifact"
	"modelplane/db"
	"modelplane/runtime/model"
)

// replicaSpec is what a node's agent needs to run one replica: where it
// runs (slots), what it serves (the version, its runtime and format), the
// digest of the version's manifest, by which the agent fetches the files,
// and the runtime's settings.
func replicaSpec(r db.ReplicaListAllRow) proto.ReplicaSpec {
	spec := proto.ReplicaSpec{ID: r.Name, Team: r.Team, Endpoint: r.Endpoint, Model: r.Model, Version: r.Version, Task: r.Task,
		GPUType: r.GPUType, Profile: r.Profile, Sim: json.RawMessage(r.SimProfile),
		CPUCores: int(r.CPUCores), MemoryMB: int(r.MemoryMB),
		VersionID: r.VersionID, Runtime: r.Runtime, Format: r.Format, Token: r.Token}
	if d, ok := artifact.ManifestDigest(r.ArtifactURI); ok {
		spec.Manifest = d
	}
	spec.Settings = runtimeSettings(r)
	for i := range r.SlotGpus {
		spec.Slots = append(spec.Slots, proto.Slot{GPU: int(r.SlotGpus[i]), Slice: int(r.SlotSlices[i])})
	}
	return spec
}

// builtinRuntimes are the registry runtimes the built-in runtime serves.
var builtinRuntimes = map[string]bool{"xgboost": true, "lightgbm": true, "onnxruntime": true}

// runtimeSettings is the built-in runtime's configuration of a replica
// (runtime/model.Config) for the versions it serves, and nil for the
// others, whose runtimes take no settings from the platform yet. It holds
// what the registry knows today: the endpoint's name, the version, the
// format and the model's features in order; the output mapping, sample
// inputs and batching come with the registry fields that carry them.
func runtimeSettings(r db.ReplicaListAllRow) json.RawMessage {
	if !builtinRuntimes[r.Runtime] {
		return nil
	}
	cfg := model.Config{Model: r.Endpoint, Version: r.Version, Format: r.Format, Features: []model.Feature{}}
	for _, f := range r.FeatureNames {
		cfg.Features = append(cfg.Features, model.Feature{Name: f})
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil // a Config of strings always encodes
	}
	return b
}
