package replica

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// v2Input is one input tensor of a V2 infer request; only the first is
// read, as rows of its shape's second dimension.
type v2Input struct {
	Name  string          `json:"name"`
	Shape []int64         `json:"shape"`
	Data  json.RawMessage `json:"data"`
}

type v2Output struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
	Data     any     `json:"data"`
}

// infer answers POST /v2/models/{model}/infer as a Triton replica of a
// classic version would, so that a version whose runtime speaks only the
// V2 protocol (the gateway translates its calls, gateway/kserve) can be
// simulated too: the first input's rows are the instances, the answer is
// output__0 FP32 [N, 1] (the score, or the regression value) and, for a
// classifier, the labels as BYTES output label [N]. The draws are the ones
// /predict makes, seeded by each row's values.
func (s *Server) infer(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	instances, err := parseInfer(body, s.cfg.MaxInstances)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	preds, ok := s.draw(w, r, instances)
	if !ok {
		return
	}
	n := int64(len(preds))
	values := make([]float64, n)
	var labels []string
	for i, p := range preds {
		switch {
		case p.Score != nil: // a classifier's
			values[i] = *p.Score
			labels = append(labels, p.Label)
		case p.Value != nil: // a regressor's
			values[i] = *p.Value
		}
	}
	outs := []v2Output{{Name: "output__0", Datatype: "FP32", Shape: []int64{n, 1}, Data: values}}
	if labels != nil {
		outs = append(outs, v2Output{Name: "label", Datatype: "BYTES", Shape: []int64{n}, Data: labels})
	}
	writeJSON(w, http.StatusOK, map[string]any{"model_name": r.PathValue("model"), "model_version": s.cfg.Version, "outputs": outs})
}

// parseInfer reads the first input tensor of a V2 request into one
// instance per row: the row's values as written, comma-separated.
func parseInfer(body []byte, maxInstances int) ([][]byte, error) {
	var req struct {
		Inputs []v2Input `json:"inputs"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("body must be a V2 inference request: %s", jsonProblem(err))
	}
	if len(req.Inputs) == 0 {
		return nil, errors.New("inputs: at least one input is required")
	}
	in := req.Inputs[0]
	if len(in.Shape) == 0 || len(in.Shape) > 2 || in.Shape[0] < 1 || in.Shape[0] > int64(maxInstances) {
		return nil, fmt.Errorf("input %q: shape %v; want [N] or [N, F] with 1 <= N <= %d", in.Name, in.Shape, maxInstances)
	}
	width := int64(1)
	if len(in.Shape) == 2 {
		width = in.Shape[1]
	}
	var flat []json.RawMessage
	if err := json.Unmarshal(in.Data, &flat); err != nil {
		return nil, fmt.Errorf("input %q: data must be a flat array", in.Name)
	}
	if width < 1 || int64(len(flat)) != in.Shape[0]*width {
		return nil, fmt.Errorf("input %q: %d values for shape %v", in.Name, len(flat), in.Shape)
	}
	out := make([][]byte, in.Shape[0])
	for i := range out {
		out[i] = bytes.Join(bytesOf(flat[int64(i)*width:int64(i+1)*width]), []byte{','})
	}
	return out, nil
}

func bytesOf(vals []json.RawMessage) [][]byte {
	out := make([][]byte, len(vals))
	for i, v := range vals {
		out[i] = v
	}
	return out
}
