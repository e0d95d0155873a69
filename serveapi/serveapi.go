// Package serveapi is the runtime's serving contract. It holds the
// contract between the built-in runtime's server and the libraries that
// load model files (a Model scores a batch of feature rows; Config is the
// replica's serving configuration, which the agent writes beside the model
// files, ConfigFile, from the version's metadata and the endpoint's
// settings) and the platform's /predict shapes (PredictRequest,
// PredictResponse, Prediction), declared once for the runtime, the
// simulated replicas and the gateway.
//
// It holds messages, names and their documentation only: no serving, no
// decoding rules, no I/O. It imports only the standard library so that
// every loader (XGBoost, LightGBM, ONNX), the server, the gateway and the
// simulator depend on it alone.
package serveapi

import "encoding/json"

// ConfigFile is the name of the serving configuration in a replica's model
// directory. It is not one of the version's files: the agent writes it.
const ConfigFile = "modelplane-runtime.json"

// Output kinds: what each value of a model's output row means.
const (
	// OutputProbability rows are class probabilities: one value (the
	// positive class of a binary classifier) or one per class.
	OutputProbability = "probability"
	// OutputValue rows are regression values, passed on as they are.
	OutputValue = "value"
)

// Model is a loaded model. Predict is called by one goroutine at a time (the
// batcher's executor); a loader whose library is safe for concurrent use may
// still rely on that.
type Model interface {
	// NumFeatures is the width of every input row.
	NumFeatures() int
	// OutputKind is OutputProbability or OutputValue.
	OutputKind() string
	// Predict scores rows, each NumFeatures wide, and returns one output row
	// per input row, in order. A row of the wrong width is an error naming
	// the row; Predict never panics on input.
	Predict(rows [][]float32) ([][]float32, error)
	// Close releases what Load took (native sessions, memory).
	Close() error
}

// Config is a replica's serving configuration (ConfigFile).
type Config struct {
	// Model is the name the runtime answers to in /v2/models/{model}: the
	// endpoint's name.
	Model string `json:"model"`
	// Version is the version's name, reported in answers and metrics.
	Version string `json:"version"`
	// Format is the registry's format: "onnx", "xgboost-json" or "lightgbm".
	Format string `json:"format"`
	// File is the model file's path inside the directory; empty means the
	// only file with the format's extension.
	File string `json:"file,omitempty"`
	// Features are the model's inputs in the order the model reads them.
	Features []Feature `json:"features"`
	// Output says how an output row becomes an answer.
	Output Output `json:"output"`
	// SampleInputs are instances (JSON objects keyed by feature name) run
	// before the replica reports ready.
	SampleInputs []json.RawMessage `json:"sample_inputs,omitempty"`
	// Batching is the dynamic batcher's settings.
	Batching Batching `json:"batching"`
	// LLM is a GGUF version's serving.llm block as registered, which
	// sizes the LLM engine (llmserve.Settings: max_model_len,
	// max_num_seqs, max_queued_requests); absent for other formats.
	LLM json.RawMessage `json:"llm,omitempty"`
}

// Feature is one model input. A numeric feature takes a JSON number; a
// categorical one a string among Categories.
type Feature struct {
	Name string `json:"name"`
	// Categories, when set, make the feature categorical.
	Categories []string `json:"categories,omitempty"`
	// Encoding of a categorical feature: "onehot" (one input column per
	// category, in order) or "native" (one column holding the category's
	// index, as XGBoost's native categorical support reads it).
	Encoding string `json:"encoding,omitempty"`
}

// Output maps a model's output row to an answer.
type Output struct {
	// Classes names the classes of a classifier, in output order; a binary
	// classifier with one output value names the negative class first.
	Classes []string `json:"classes,omitempty"`
	// Threshold turns a binary classifier's positive-class probability
	// into a label; 0 means 0.5.
	Threshold float64 `json:"threshold,omitempty"`
}

// Batching is the dynamic batcher's settings (seed §5).
type Batching struct {
	// MaxBatchSize is the largest batch executed; 1 turns batching off.
	MaxBatchSize int `json:"max_batch_size"`
	// MaxQueueDelayUS is the longest a request waits for others to join
	// its batch.
	MaxQueueDelayUS int `json:"max_queue_delay_us"`
	// PreferredBatchSizes are executed at once when reached.
	PreferredBatchSizes []int `json:"preferred_batch_sizes,omitempty"`
	// QueueTimeoutMS is how long a request may wait in the queue at all;
	// past it the request is answered 503 and never executed.
	QueueTimeoutMS int `json:"queue_timeout_ms"`
}
