package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"modelplane/serveapi"
)

// predict answers POST /predict (serveapi.PredictRequest,
// serveapi.PredictResponse).
func (s *Server) predict(w http.ResponseWriter, r *http.Request) {
	l := s.m.Load()
	body, ok := s.readBody(w, r, writeProblem)
	if !ok {
		l.metrics.failed(reasonOther)
		return
	}
	if l.tensors != nil {
		s.predictTensorBody(w, r, l, body)
		return
	}
	rows, err := s.parsePredict(l, body)
	if err != nil {
		l.metrics.failed(reasonOther)
		writeProblem(w, http.StatusBadRequest, err.Error())
		return
	}
	res, f := s.run(r.Context(), l, rows)
	if f != nil {
		s.answerFailure(w, f, writeProblem)
		return
	}
	out := serveapi.PredictResponse[serveapi.Prediction]{Predictions: make([]serveapi.Prediction, len(rows)), ModelVersion: l.cfg.Version}
	for i, row := range res.Outputs {
		if out.Predictions[i], err = l.dec.answer(row); err != nil {
			s.log.Error("output does not fit the output mapping", "model", l.cfg.Model, "error", err.Error())
			writeProblem(w, http.StatusInternalServerError, "the model's output does not fit its output mapping")
			return
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// predictTensorBody answers /predict for a tensor model: the predictions
// are objects keyed by output name (predictTensors).
func (s *Server) predictTensorBody(w http.ResponseWriter, r *http.Request, l *loaded, body []byte) {
	instances, err := s.predictInstances(body)
	if err != nil {
		l.metrics.failed(reasonOther)
		writeProblem(w, http.StatusBadRequest, err.Error())
		return
	}
	preds, f, err := s.predictTensors(r.Context(), l, instances)
	if err != nil {
		l.metrics.failed(reasonOther)
		writeProblem(w, http.StatusBadRequest, err.Error())
		return
	}
	if f != nil {
		s.answerFailure(w, f, writeProblem)
		return
	}
	// The answer is /predict's shape (serveapi.PredictResponse) with each
	// prediction the model's outputs by name.
	writeJSON(w, http.StatusOK, struct {
		Predictions  []map[string]any `json:"predictions"`
		ModelVersion string           `json:"model_version"`
	}{preds, l.cfg.Version})
}

// predictInstances reads a predict body's instances, checking their count.
func (s *Server) predictInstances(body []byte) ([]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var req serveapi.PredictRequest
	if err := dec.Decode(&req); err != nil {
		return nil, fmt.Errorf("body must be a JSON object with an instances array: %s", jsonProblem(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("body must hold one JSON object")
	}
	switch {
	case req.Instances == nil:
		return nil, errors.New("instances is required")
	case len(req.Instances) == 0:
		return nil, errors.New("instances must not be empty")
	case len(req.Instances) > s.opt.MaxInstances:
		return nil, fmt.Errorf("instances: at most %d per request", s.opt.MaxInstances)
	}
	return req.Instances, nil
}

// parsePredict reads a predict body into model rows. Its errors name the
// field at fault and are safe to show.
func (s *Server) parsePredict(l *loaded, body []byte) ([][]float32, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var req serveapi.PredictRequest
	if err := dec.Decode(&req); err != nil {
		return nil, fmt.Errorf("body must be a JSON object with an instances array: %s", jsonProblem(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("body must hold one JSON object")
	}
	switch {
	case req.Instances == nil:
		return nil, errors.New("instances is required")
	case len(req.Instances) == 0:
		return nil, errors.New("instances must not be empty")
	case len(req.Instances) > s.opt.MaxInstances:
		return nil, fmt.Errorf("instances: at most %d per request", s.opt.MaxInstances)
	}
	rows := make([][]float32, len(req.Instances))
	for i, raw := range req.Instances {
		row, err := l.enc.instance(raw, fmt.Sprintf("instances[%d]", i))
		if err != nil {
			return nil, err
		}
		rows[i] = row
	}
	return rows, nil
}

// jsonProblem describes a decoding error without echoing input.
func jsonProblem(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("malformed JSON at byte %d", syn.Offset)
	case errors.As(err, &typ):
		if typ.Field != "" {
			return fmt.Sprintf("%s has the wrong type", typ.Field)
		}
		return "wrong JSON type"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected end of JSON"
	default:
		return "malformed JSON"
	}
}
