package busapi

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A gateway's PredictionBatch goes over the bus in a binary form of its own
// rather than as JSON: the ingest spent more of its CPU on reading the JSON
// (its numbers above all) than on everything else it did with a sample
// (docs/decisions.md, "Prediction samples travel in binary"). The ingest still reads
// a JSON batch or lone sample, what gateways of earlier versions publish.
//
// The form, in the parts of binary.go:
//
//	"MPS1" id gateway count sample…
//	sample: ID Time Endpoint Team Version LatencyMS Tokens flags EndpointID
//	        len(FeatureNames) name… len(Instances) instance…
//	instance: len(Num) num… len(Str) str… Score Label
//
// flags is one byte: 1 when Pinned.
const samplesMagic = "MPS1"

// IsBinarySamples reports whether data is a binary PredictionBatch
// (SampleBody.Message), not JSON.
func IsBinarySamples(data []byte) bool {
	return hasMagic(data, samplesMagic)
}

// SampleBody gathers encoded samples for one binary PredictionBatch message,
// up to BatchMaxBytes: a gateway's sampler builds its messages with it, and
// `modelplane bench ingest` the messages it publishes as gateways would.
type SampleBody struct{ body }

// Add encodes s into b and reports true, unless b holds samples already and
// the message would grow past BatchMaxBytes with s, in which case b is left
// as it was; the first sample is always added.
func (b *SampleBody) Add(s *PredictionSample) bool {
	mark := len(b.items)
	b.items = appendSample(b.items, s)
	return b.keep(mark)
}

// Message returns the batch of the samples gathered, with id and gateway,
// and empties b.
func (b *SampleBody) Message(id, gateway string) []byte { return b.message(samplesMagic, id, gateway) }

func appendSample(b []byte, s *PredictionSample) []byte {
	b = appendString(b, s.ID)
	b = binary.AppendVarint(b, s.Time)
	b = appendString(appendString(appendString(b, s.Endpoint), s.Team), s.Version)
	b = appendFloat(b, s.LatencyMS)
	b = binary.AppendVarint(b, int64(s.Tokens))
	var flags byte
	if s.Pinned {
		flags |= 1
	}
	b = append(b, flags)
	b = binary.AppendVarint(b, s.EndpointID)
	b = binary.AppendUvarint(b, uint64(len(s.FeatureNames)))
	for _, n := range s.FeatureNames {
		b = appendString(b, n)
	}
	b = binary.AppendUvarint(b, uint64(len(s.Instances)))
	for i := range s.Instances {
		in := &s.Instances[i]
		b = binary.AppendUvarint(b, uint64(len(in.Num)))
		for _, v := range in.Num {
			b = appendFloat(b, v)
		}
		b = binary.AppendUvarint(b, uint64(len(in.Str)))
		for _, v := range in.Str {
			b = appendString(b, v)
		}
		b = appendString(appendFloat(b, in.Score), in.Label)
	}
	return b
}

// DecodeSamples parses a binary PredictionBatch (IsBinarySamples). The
// message is copied once: every string of the batch is a part of that copy,
// and the instances and their numbers and strings are cut from one array
// each, so that a batch of a thousand samples is a handful of allocations
// rather than tens of thousands. A batch that does not parse is an error,
// never a panic (FuzzDecodeSamples).
func DecodeSamples(data []byte) (PredictionBatch, error) {
	if !IsBinarySamples(data) {
		return PredictionBatch{}, errors.New("not a binary batch of samples")
	}
	d := sampleDecoder{decoder: newDecoder(data[len(samplesMagic):])}
	b := PredictionBatch{ID: d.str(), Gateway: d.str()}
	n := d.count(minSampleBytes)
	if d.err != nil {
		return PredictionBatch{}, d.err
	}
	b.Samples = make([]PredictionSample, n)
	for i := range b.Samples {
		d.sample(&b.Samples[i])
		if d.err != nil {
			return PredictionBatch{}, fmt.Errorf("sample %d: %w", i, d.err)
		}
	}
	if err := d.end("sample"); err != nil {
		return PredictionBatch{}, err
	}
	return b, nil
}

// The fewest bytes each part takes, which bound a count before anything is
// made for it.
const (
	minSampleBytes   = 4 + 1 + 8 + 1 + 1 + 1 + 2 // four strings, time, latency, tokens, flags, endpoint id, two counts
	minInstanceBytes = 2 + 8 + 1                 // two counts, score, label
)

// sampleDecoder is a decoder with the arrays a batch's slices are cut
// from, grown a chunk at a time.
type sampleDecoder struct {
	decoder
	nums  []float64
	strs  []string
	insts []SampleInstance
}

func (d *sampleDecoder) sample(s *PredictionSample) {
	s.ID = d.str()
	s.Time = d.varint()
	s.Endpoint, s.Team, s.Version = d.str(), d.str(), d.str()
	s.LatencyMS = d.float()
	s.Tokens = int(d.varint())
	if d.err == nil && d.i < len(d.b) {
		s.Pinned = d.b[d.i]&1 != 0
		d.i++
	} else {
		d.fail("flags")
	}
	s.EndpointID = d.varint()
	if n := d.count(1); n > 0 {
		s.FeatureNames = d.strings(n)
	}
	if n := d.count(minInstanceBytes); n > 0 {
		s.Instances = d.instances(n)
		for i := range s.Instances {
			in := &s.Instances[i]
			in.Num = d.floats(d.count(8))
			in.Str = d.strings(d.count(1))
			in.Score, in.Label = d.float(), d.str()
		}
	}
}

func (d *sampleDecoder) instances(n int) []SampleInstance {
	return cut(&d.insts, n, min(arenaChunk, d.left()/minInstanceBytes))
}

// floats reads n numbers into a slice of d.nums.
func (d *sampleDecoder) floats(n int) []float64 {
	out := cut(&d.nums, n, min(arenaChunk, d.left()/8))
	for i := range out {
		out[i] = d.float()
	}
	return out
}

// strings reads n strings into a slice of d.strs.
func (d *sampleDecoder) strings(n int) []string {
	out := cut(&d.strs, n, min(arenaChunk, d.left()))
	for i := range out {
		out[i] = d.str()
	}
	return out
}
