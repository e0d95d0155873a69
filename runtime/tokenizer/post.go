package tokenizer

import (
	"encoding/json"
	"fmt"
)

// postProcessor adds the special tokens around a text's ids and gives
// every id its type id.
type postProcessor struct {
	// template is the single-sequence template: special ids or the
	// sequence (nil ids) with its type id.
	template []piece
}

type piece struct {
	ids    []int64 // nil: the text's ids
	typeID int64
}

func (p postProcessor) added() int {
	n := 0
	for _, x := range p.template {
		n += len(x.ids)
	}
	return n
}

func (p postProcessor) apply(ids []int64) ([]int64, []int64) {
	if p.template == nil {
		return ids, make([]int64, len(ids))
	}
	var out, types []int64
	for _, x := range p.template {
		src := x.ids
		if src == nil {
			src = ids
		}
		out = append(out, src...)
		for range src {
			types = append(types, x.typeID)
		}
	}
	return out, types
}

func parsePostProcessor(raw json.RawMessage) (postProcessor, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return postProcessor{}, nil
	}
	var c struct {
		Type    string            `json:"type"`
		Sep     []json.RawMessage `json:"sep"`
		CLS     []json.RawMessage `json:"cls"`
		Single  []json.RawMessage `json:"single"`
		Special map[string]struct {
			IDs []int64 `json:"ids"`
		} `json:"special_tokens"`
		Processors []json.RawMessage `json:"processors"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return postProcessor{}, fmt.Errorf("post_processor: %w", err)
	}
	switch c.Type {
	case "ByteLevel":
		return postProcessor{}, nil
	case "BertProcessing", "RobertaProcessing":
		idOf := func(pair []json.RawMessage) (int64, error) {
			var id int64
			if len(pair) != 2 || json.Unmarshal(pair[1], &id) != nil {
				return 0, fmt.Errorf("post_processor %s: sep and cls must be [token, id]", c.Type)
			}
			return id, nil
		}
		cls, err := idOf(c.CLS)
		if err != nil {
			return postProcessor{}, err
		}
		sep, err := idOf(c.Sep)
		if err != nil {
			return postProcessor{}, err
		}
		return postProcessor{template: []piece{{ids: []int64{cls}}, {}, {ids: []int64{sep}}}}, nil
	case "TemplateProcessing":
		var p postProcessor
		for i, raw := range c.Single {
			var x struct {
				SpecialToken *struct {
					ID     string `json:"id"`
					TypeID int64  `json:"type_id"`
				}
				Sequence *struct {
					TypeID int64 `json:"type_id"`
				}
			}
			if err := json.Unmarshal(raw, &x); err != nil {
				return postProcessor{}, fmt.Errorf("post_processor TemplateProcessing: single[%d]: %w", i, err)
			}
			switch {
			case x.SpecialToken != nil:
				sp, ok := c.Special[x.SpecialToken.ID]
				if !ok || len(sp.IDs) == 0 {
					return postProcessor{}, fmt.Errorf("post_processor TemplateProcessing: special token %q has no ids", x.SpecialToken.ID)
				}
				p.template = append(p.template, piece{ids: sp.IDs, typeID: x.SpecialToken.TypeID})
			case x.Sequence != nil:
				p.template = append(p.template, piece{typeID: x.Sequence.TypeID})
			}
		}
		return p, nil
	case "Sequence":
		// Each step's template wraps the last; ByteLevel steps add none.
		var p postProcessor
		for _, r := range c.Processors {
			q, err := parsePostProcessor(r)
			if err != nil {
				return postProcessor{}, err
			}
			if q.template != nil {
				if p.template != nil {
					return postProcessor{}, fmt.Errorf("post_processor Sequence: more than one step adds tokens")
				}
				p = q
			}
		}
		return p, nil
	}
	return postProcessor{}, fmt.Errorf("post_processor %q is not supported", c.Type)
}
