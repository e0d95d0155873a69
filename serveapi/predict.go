package serveapi

import "encoding/json"

// PredictRequest is the body of POST /predict, the shape the gateway
// relays (`{"instances": [...]}`): one JSON value per instance, an object
// keyed by feature name or an array in feature order. Other top-level keys
// are ignored.
type PredictRequest struct {
	Instances []json.RawMessage `json:"instances"`
}

// PredictResponse is the answer to POST /predict: one prediction per
// instance, in order, and the version that answered. Every runtime the
// platform ships (the built-in runtime, the simulated replicas, and the
// gateway's translation of a V2-only runtime's answer) answers with P =
// Prediction; a reader of any runtime's answers, which may be bare numbers
// or labels, reads each prediction as json.RawMessage.
type PredictResponse[P Prediction | json.RawMessage] struct {
	Predictions  []P    `json:"predictions"`
	ModelVersion string `json:"model_version"`
}

// Prediction is one instance's answer. A classifier's has Label and Score
// (the positive-class probability of a binary classifier, the winning
// class's of a multiclass one) and, when the model gives more than one
// value, each class's probability; a regressor's has Value, or Values for
// a model with several outputs. Unset fields are left out of the JSON, so
// a classifier answers {"label":…,"score":…} and a regressor {"value":…}.
type Prediction struct {
	Label         string             `json:"label,omitempty"`
	Score         *float64           `json:"score,omitempty"`
	Probabilities map[string]float64 `json:"probabilities,omitempty"`
	Value         *float64           `json:"value,omitempty"`
	Values        []float64          `json:"values,omitempty"`
}
