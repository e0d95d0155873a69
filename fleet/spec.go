package fleet

import (
	"encoding/json"

	"modelplane/artifact"
	"modelplane/busapi"
	"modelplane/db"
	"modelplane/registry"
	"modelplane/serveapi"
)

// replicaSpec is what a node's agent needs to run one replica: where it
// runs (slots), what it serves (the version, its runtime and format), the
// digest of the version's manifest, by which the agent fetches the files,
// and the runtime's settings.
func replicaSpec(r db.ReplicaListAllRow) busapi.ReplicaSpec {
	spec := busapi.ReplicaSpec{ID: r.Name, Team: r.Team, Endpoint: r.Endpoint, Model: r.Model, Version: r.Version, Task: r.Task,
		GPUType: r.GPUType, Profile: r.Profile, Sim: json.RawMessage(r.SimProfile),
		CPUCores: int(r.CPUCores), MemoryMB: int(r.MemoryMB),
		VersionID: r.VersionID, Runtime: r.Runtime, Format: r.Format, Token: r.Token}
	if d, ok := artifact.ManifestDigest(r.ArtifactURI); ok {
		spec.Manifest = d
	}
	spec.Settings = runtimeSettings(r)
	for i := range r.SlotGpus {
		spec.Slots = append(spec.Slots, busapi.Slot{GPU: int(r.SlotGpus[i]), Slice: int(r.SlotSlices[i])})
	}
	return spec
}

// runtimeSettings is the built-in runtime's configuration of a replica
// (runtime/serveapi.Config) for the versions it serves, and nil for the
// others, whose runtimes take no settings from the platform yet: the
// endpoint's name, the version, the format, the version's serving
// metadata (registry.Serving: features in order with their categories and
// encoding, the output mapping and the sample inputs warm-up runs) and the
// endpoint's batching settings.
//
// A vllm or llamacpp version's settings are its metadata.serving.llm
// block as registered, from which the agent generates the runtime's
// command line (catalog.VLLMArgs, catalog.LlamaServerArgs).
func runtimeSettings(r db.ReplicaListAllRow) json.RawMessage {
	if r.Runtime == "vllm" || r.Runtime == "llamacpp" {
		return registry.LLMSettings(r.Serving)
	}
	if !registry.BuiltIn(r.Runtime) {
		return nil
	}
	cfg := registry.RuntimeConfig(r.Endpoint, r.Version, r.Format, r.Serving, r.FeatureNames)
	cfg.Batching = batching(r)
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil // a Config of strings always encodes
	}
	return b
}

// batching is the endpoint's dynamic batcher settings as the runtime reads
// them. They are part of the spec, so a change of them changes the spec's
// hash and the agent restarts the replica with them (agent.specHash).
func batching(r db.ReplicaListAllRow) serveapi.Batching {
	b := serveapi.Batching{MaxBatchSize: int(r.BatchMaxSize), MaxQueueDelayUS: int(r.BatchMaxQueueDelayUS), QueueTimeoutMS: int(r.BatchQueueTimeoutMS)}
	for _, n := range r.BatchPreferredSizes {
		b.PreferredBatchSizes = append(b.PreferredBatchSizes, int(n))
	}
	return b
}
