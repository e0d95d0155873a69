package ingest

import (
	"bytes"
	"encoding/json"
	"reflect"
	"unicode/utf8"

	gojson "github.com/goccy/go-json"

	"modelplane/busapi"
)

// decodeJSON parses one message of a stream into v. Decoding is a large
// share of the consumers' CPU at fleet scale: encoding/json's reflection
// took half of the usage consumer's in `modelplane bench ingest`, and
// goccy/go-json, which compiles a decoder per type, brought end-to-end
// rows/s from about 146k to about 240k on two cores. Usage batches and
// prediction samples go through it. Invalid UTF-8 (which agents and
// gateways never send) goes to encoding/json, whose replacement of bad
// bytes goccy does not copy; FuzzDecodeBatch and FuzzDecodeSample hold the
// result to encoding/json's. Agents and gateways now publish binary batches
// (busapi.DecodeUsage, busapi.DecodeSamples); JSON is what earlier versions
// send. Request statistics go through decodeExact.
func decodeJSON(data []byte, v any) error {
	if !utf8.Valid(data) {
		return json.Unmarshal(data, v)
	}
	return gojson.Unmarshal(data, v)
}

// decodeBatch parses one MP_USAGE message: a binary batch, or JSON from an
// agent older than the binary form (busapi.IsBinaryUsage).
func decodeBatch(data []byte, b *busapi.UsageBatch) (err error) {
	if busapi.IsBinaryUsage(data) {
		*b, err = busapi.DecodeUsage(data)
		return err
	}
	return decodeJSON(data, b)
}

// decodeExact parses one message into v (a pointer to a struct) with
// goccy/go-json where every key names a field exactly, else with
// encoding/json. goccy matches the keys of a struct of many fields
// case-sensitively (busapi.ReqStats), where encoding/json does not, so
// goccy is trusted only when it finds no key outside the fields, which a
// key in another case is to it; anything else it refuses or finds
// (another case, a field this build does not know, trailing data) is
// parsed again by encoding/json from scratch. Decoding took a third of
// the request statistics consumer's CPU with encoding/json in `modelplane
// bench ingest`. FuzzDecodeReqStats holds the result to encoding/json's.
func decodeExact(data []byte, v any) error {
	// The stream decoder is lenient with malformed literals ("nu\x00l"
	// is null to it), so it sees only what encoding/json's scanner,
	// which Unmarshal runs first anyway, finds valid.
	if utf8.Valid(data) && json.Valid(data) {
		dec := gojson.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		err := dec.Decode(v)
		if off := dec.InputOffset(); err == nil && off <= int64(len(data)) && len(bytes.TrimLeft(data[off:], " \t\r\n")) == 0 {
			return nil
		}
		reflect.ValueOf(v).Elem().SetZero()
	}
	return json.Unmarshal(data, v)
}
