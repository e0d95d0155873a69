package ingest

import (
	"encoding/json"
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
// result to encoding/json's. Request statistics do not: goccy matches their
// keys case-sensitively (a struct of that many fields), encoding/json does
// not.
func decodeJSON(data []byte, v any) error {
	if !utf8.Valid(data) {
		return json.Unmarshal(data, v)
	}
	return gojson.Unmarshal(data, v)
}

// decodeBatch parses one MP_USAGE message.
func decodeBatch(data []byte, b *busapi.UsageBatch) error { return decodeJSON(data, b) }
