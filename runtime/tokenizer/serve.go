package tokenizer

import (
	"encoding/binary"
	"fmt"

	"modelplane/serveapi"
)

// The tensors the runtime serves a tokenizer with.
const (
	InputText     = "text"
	OutputIDs     = "input_ids"
	OutputMask    = "attention_mask"
	OutputTypeIDs = "token_type_ids"
)

// Model serves a Tokenizer as a serveapi.TensorModel.
type Model struct {
	tok *Tokenizer
}

// Open loads the tokenizer.json at path for the runtime.
func Open(path string) (serveapi.TensorModel, error) {
	t, err := Load(path)
	if err != nil {
		return nil, err
	}
	return &Model{tok: t}, nil
}

// Inputs is one BYTES text per row.
func (m *Model) Inputs() []serveapi.TensorSpec {
	return []serveapi.TensorSpec{{Name: InputText, Datatype: serveapi.TypeBytes, Shape: []int64{-1}}}
}

// Outputs are the ids, mask and type ids, one row per text.
func (m *Model) Outputs() []serveapi.TensorSpec {
	shape := []int64{-1, -1}
	return []serveapi.TensorSpec{
		{Name: OutputIDs, Datatype: serveapi.TypeInt64, Shape: shape},
		{Name: OutputMask, Datatype: serveapi.TypeInt64, Shape: shape},
		{Name: OutputTypeIDs, Datatype: serveapi.TypeInt64, Shape: shape},
	}
}

// BatchesFirstAxis is false: rows are padded to the longest text of a
// request, which must not depend on another caller's text.
func (m *Model) BatchesFirstAxis() bool { return false }

// Run tokenizes every text and pads them to one length.
func (m *Model) Run(inputs []serveapi.Tensor) ([]serveapi.Tensor, error) {
	if len(inputs) != 1 || inputs[0].Datatype != serveapi.TypeBytes {
		return nil, fmt.Errorf("tokenizer: want one BYTES input %q", InputText)
	}
	texts := inputs[0].Strings
	encs := make([]Encoding, len(texts))
	for i, s := range texts {
		e, err := m.tok.Encode(s)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: text %d: %w", i, err)
		}
		encs[i] = e
	}
	n := m.tok.Pad(encs)
	shape := []int64{int64(len(texts)), int64(n)}
	out := []serveapi.Tensor{
		{Name: OutputIDs, Datatype: serveapi.TypeInt64, Shape: shape},
		{Name: OutputMask, Datatype: serveapi.TypeInt64, Shape: shape},
		{Name: OutputTypeIDs, Datatype: serveapi.TypeInt64, Shape: shape},
	}
	for _, e := range encs {
		out[0].Data = appendInt64s(out[0].Data, e.IDs)
		out[1].Data = appendInt64s(out[1].Data, e.Mask)
		out[2].Data = appendInt64s(out[2].Data, e.TypeIDs)
	}
	for i := range out {
		if out[i].Data == nil {
			out[i].Data = []byte{}
		}
	}
	return out, nil
}

func appendInt64s(b []byte, vs []int64) []byte {
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return b
}

// Close releases nothing: the tokenizer is memory only.
func (m *Model) Close() error { return nil }
