package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
)

// kind is the inference call a request makes.
type kind int

const (
	kindPredict kind = iota
	kindChat
	// kindCompletion is OpenAI's legacy text completion (a prompt).
	kindCompletion
)

// llm reports whether the call is one an LLM endpoint serves.
func (k kind) llm() bool { return k == kindChat || k == kindCompletion }

// upstreamPath is the replica's path for the call.
func (k kind) upstreamPath() string {
	switch k {
	case kindChat:
		return "/v1/chat/completions"
	case kindCompletion:
		return "/v1/completions"
	}
	return "/predict"
}

// errBadRequest wraps every decoding failure; its message is safe to show.
var errBadRequest = errors.New("bad request")

type predictRequest struct {
	Instances []json.RawMessage `json:"instances"`
}

type chatRequest struct {
	Messages []json.RawMessage `json:"messages"`
	Stream   bool              `json:"stream"`
	N        *int              `json:"n"`
}

type completionRequest struct {
	Prompt json.RawMessage `json:"prompt"`
	Stream bool            `json:"stream"`
	N      *int            `json:"n"`
}

// errOneChoice refuses n > 1: a replica generates one choice per request,
// and a caller asking for more must not be billed for one silently.
var errOneChoice = errors.Join(errBadRequest, errors.New("n: only 1 is supported; send n requests for n choices"))

// decodeRequest checks the shape of an inference body before it goes
// upstream, so that a replica only sees well-formed calls, and reports
// whether the caller asked for a stream. The replica validates the rest.
func decodeRequest(k kind, body []byte) (stream bool, err error) {
	switch k {
	case kindChat:
		var r chatRequest
		if err := json.Unmarshal(body, &r); err != nil {
			return false, badJSON(err)
		}
		if len(r.Messages) == 0 {
			return false, errors.Join(errBadRequest, errors.New("messages: must be a non-empty array"))
		}
		if r.N != nil && *r.N != 1 {
			return false, errOneChoice
		}
		return r.Stream, nil
	case kindCompletion:
		var r completionRequest
		if err := json.Unmarshal(body, &r); err != nil {
			return false, badJSON(err)
		}
		// A string, or an array of strings or of token ids: the replica
		// reads it; an absent or empty prompt is refused here.
		if p := bytes.TrimSpace(r.Prompt); len(p) == 0 || string(p) == "null" || string(p) == `""` || string(p) == "[]" {
			return false, errors.Join(errBadRequest, errors.New("prompt: must be a non-empty string"))
		}
		if r.N != nil && *r.N != 1 {
			return false, errOneChoice
		}
		return r.Stream, nil
	default:
		var r predictRequest
		if err := json.Unmarshal(body, &r); err != nil {
			return false, badJSON(err)
		}
		if len(r.Instances) == 0 {
			return false, errors.Join(errBadRequest, errors.New("instances: must be a non-empty array"))
		}
		return false, nil
	}
}

// badJSON turns a decoding error into one that names the field when it can,
// without echoing the body.
func badJSON(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			return errors.Join(errBadRequest, errors.New("body must be a JSON object"))
		}
		return errors.Join(errBadRequest, errors.New(field+": must be "+te.Type.String()))
	}
	return errors.Join(errBadRequest, errors.New("body is not valid JSON"))
}

// API key shape, as package auth makes them: "mpk_" + 12 hex + "_" + 43
// base64url characters. The gateway does not import auth (which reads the
// database); the shape is part of the key contract.
const (
	keyPrefix = "mpk_"
	lookupLen = 12
	secretLen = 43
)

// bearerKey returns the API key of an Authorization header and its lookup
// prefix; ok is false when there is none of the right shape.
func bearerKey(header string) (raw, prefix string, ok bool) {
	scheme, token, found := strings.Cut(header, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", "", false
	}
	token = strings.TrimSpace(token)
	if !strings.HasPrefix(token, keyPrefix) || len(token) != len(keyPrefix)+lookupLen+1+secretLen {
		return "", "", false
	}
	prefix = token[:len(keyPrefix)+lookupLen]
	if token[len(prefix)] != '_' {
		return "", "", false
	}
	return token, prefix, true
}

// requestID returns the caller's X-Request-Id when it is sane (1-128
// characters of letters, digits and "-_.:"), and a fresh one otherwise.
func requestID(in string) string {
	if len(in) > 0 && len(in) <= 128 {
		ok := true
		for i := 0; i < len(in) && ok; i++ {
			c := in[i]
			ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':'
		}
		if ok {
			return in
		}
	}
	return newRequestID()
}

// idAlphabet is lower-case base32, the characters of a fresh request id.
const idAlphabet = "abcdefghijklmnopqrstuvwxyz234567"

// newRequestID is 26 random characters of idAlphabet (130 bits), as
// crypto/rand.Text makes them but in lower case, in one allocation. The
// bits are math/rand/v2's (the runtime's ChaCha8, seeded by the kernel):
// an id must be unique, not secret (a caller may choose its own), and the
// kernel's generator cost 2.5 % of a proxied request's CPU.
func newRequestID() string {
	var b [26]byte
	for i := 0; i < len(b); i += 12 {
		r := rand.Uint64()
		for j := i; j < min(i+12, len(b)); j++ {
			b[j] = idAlphabet[r%32]
			r >>= 5
		}
	}
	return string(b[:])
}
