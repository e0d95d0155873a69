package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Answer runs instances through the loaded model as one batch and returns
// each one's answer as /predict gives it, ready or not: validation at
// registration calls it after Load. An error names the instance at fault,
// or says the output does not fit the output mapping.
func (s *Server) Answer(ctx context.Context, instances []json.RawMessage) ([]json.RawMessage, error) {
	l := s.m.Load()
	if l == nil {
		return nil, errors.New("runtime: no model loaded")
	}
	if len(instances) == 0 {
		return nil, errors.New("no instances")
	}
	if l.tensors != nil {
		preds, f, err := s.predictTensors(ctx, l, instances)
		if err != nil {
			return nil, err
		}
		if f != nil {
			return nil, errors.New(f.msg)
		}
		out := make([]json.RawMessage, len(preds))
		for i, p := range preds {
			if out[i], err = json.Marshal(p); err != nil {
				return nil, fmt.Errorf("instances[%d]: %w", i, err)
			}
		}
		return out, nil
	}
	rows := make([][]float32, len(instances))
	for i, raw := range instances {
		row, err := l.enc.instance(raw, fmt.Sprintf("instances[%d]", i))
		if err != nil {
			return nil, err
		}
		rows[i] = row
	}
	res, err := l.batcher.Do(ctx, rows)
	if err != nil {
		return nil, err
	}
	out := make([]json.RawMessage, len(res.Outputs))
	for i, row := range res.Outputs {
		a, err := l.dec.answer(row)
		if err != nil {
			return nil, fmt.Errorf("instances[%d]: %w", i, err)
		}
		if out[i], err = json.Marshal(a); err != nil {
			return nil, fmt.Errorf("instances[%d]: %w", i, err)
		}
	}
	return out, nil
}
