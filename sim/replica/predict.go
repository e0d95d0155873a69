package replica

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"modelplane/serveapi"
)

// parsePredict reads a predict body (serveapi.PredictRequest; other
// top-level keys, for example "parameters", are ignored) and returns each instance in canonical
// form: compact JSON with object keys sorted and numbers as written, so that
// whitespace and key order do not change an instance's hash. Its errors are
// safe to show the client; they never quote the payload.
func parsePredict(body []byte, maxInstances int) ([][]byte, error) {
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
	case len(req.Instances) > maxInstances:
		return nil, fmt.Errorf("at most %d instances per request", maxInstances)
	}
	out := make([][]byte, len(req.Instances))
	for i, raw := range req.Instances {
		c, err := canonical(raw)
		if err != nil {
			return nil, fmt.Errorf("instances[%d]: %s", i, jsonProblem(err))
		}
		out[i] = c
	}
	return out, nil
}

// canonical re-encodes one JSON value with sorted keys and no whitespace.
func canonical(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
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

// predict answers POST /predict. The request-level draw (failure, latency)
// is seeded by all instances together; each prediction by its own instance,
// so an instance gets the same answer whatever it is batched with.
func (s *Server) predict(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	instances, err := parsePredict(body, s.cfg.MaxInstances)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, err.Error())
		return
	}
	preds, ok := s.draw(w, r, instances)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, serveapi.PredictResponse[serveapi.Prediction]{Predictions: preds, ModelVersion: s.cfg.Version})
}

// draw waits the request's simulated latency and returns one prediction
// (classification or regression) per instance; ok is false when the
// request was answered (a simulated failure) or its client left.
func (s *Server) draw(w http.ResponseWriter, r *http.Request, instances [][]byte) (preds []serveapi.Prediction, ok bool) {
	start := s.clock.Now()
	rr := newRand(s.cfg.Seed, hashBytes(s.cfg.Seed, instances...))
	fail, latency := s.model.outcome(rr)
	if latency > 0 {
		wait := s.clock.NewTimer(latency, "replica", "latency")
		select {
		case <-wait.C:
		case <-r.Context().Done():
			wait.Stop()
			return nil, false // the client left; nothing to write
		}
	}
	end := s.clock.Now()
	s.stats.latencySample(end.Sub(start))
	if trace.SpanFromContext(r.Context()).IsRecording() {
		_, span := s.tracer.Start(r.Context(), "ml_serving.gpu_inference", trace.WithTimestamp(start),
			trace.WithAttributes(attribute.Int("rows", len(instances))))
		span.End(trace.WithTimestamp(end))
	}
	if fail {
		writeProblem(w, http.StatusInternalServerError, "simulated model failure")
		return nil, false
	}
	preds = make([]serveapi.Prediction, len(instances))
	for i, inst := range instances {
		ir := newRand(s.cfg.Seed, hashBytes(s.cfg.Seed, []byte("instance"), inst))
		if s.cfg.Task == TaskRegression {
			preds[i] = s.model.regress(ir)
		} else {
			preds[i] = s.model.classify(ir)
		}
	}
	return preds, true
}
