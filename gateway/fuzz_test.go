package gateway

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/coder/quartz"
	jose "github.com/go-jose/go-jose/v4"

	"modelplane/busapi"
)

// FuzzDecodeRequest: any body is accepted or refused with errBadRequest,
// never a panic, and an accepted chat body's stream flag is what JSON says.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"instances":[{"amount":1}]}`, `{"instances":[]}`, `{"instances":null}`, `[]`, `null`, `{`,
		`{"messages":[{"role":"user","content":"hi"}],"stream":true}`, `{"messages":[],"stream":"yes"}`,
	} {
		f.Add(false, []byte(s))
		f.Add(true, []byte(s))
	}
	f.Fuzz(func(t *testing.T, chat bool, body []byte) {
		k := kindPredict
		if chat {
			k = kindChat
		}
		stream, err := decodeRequest(k, body)
		if err != nil {
			if !errors.Is(err, errBadRequest) {
				t.Fatalf("error %v is not a bad request", err)
			}
			return
		}
		if stream && !chat {
			t.Fatal("a predict body reported a stream")
		}
	})
}

// FuzzEventReader: the events read, joined, are the stream itself (nothing
// lost, nothing added), and every event but the last ends with a blank line.
func FuzzEventReader(f *testing.F) {
	for _, s := range []string{
		"data: {\"a\":1}\n\ndata: [DONE]\n\n", "data: x\r\n\r\n", "\n\ndata: y\n\n", "data: no end", ": comment\nevent: e\ndata: z\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		er := newEventReader(bytes.NewReader(in))
		var got bytes.Buffer
		var events [][]byte
		for {
			ev, err := er.next()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, errEventTooLarge) {
					t.Fatalf("error %v", err)
				}
				break
			}
			if len(ev) == 0 {
				t.Fatal("empty event")
			}
			events = append(events, ev)
			got.Write(ev)
		}
		for i, ev := range events[:max(0, len(events)-1)] {
			if !bytes.HasSuffix(ev, []byte("\n\n")) && !bytes.HasSuffix(ev, []byte("\r\n")) {
				t.Fatalf("event %d %q does not end with a blank line", i, ev)
			}
		}
		// Stray blank lines between events are dropped; everything else
		// comes through.
		strip := func(b []byte) string {
			return strings.NewReplacer("\r", "", "\n", "").Replace(string(b))
		}
		if len(in) <= maxEventBytes && strip(got.Bytes()) != strip(in) {
			t.Fatalf("events %q lose or add bytes of %q", got.Bytes(), in)
		}
	})
}

// FuzzBearerKey: a header is a key of the right shape or refused; the
// lookup prefix is always the key's start.
func FuzzBearerKey(f *testing.F) {
	f.Add("Bearer mpk_0123456789ab_" + strings.Repeat("A", 43))
	f.Add("bearer mpk_0123456789ab-" + strings.Repeat("A", 43))
	f.Add("Basic abc")
	f.Add("Bearer ")
	f.Fuzz(func(t *testing.T, h string) {
		raw, prefix, ok := bearerKey(h)
		if !ok {
			return
		}
		if !strings.HasPrefix(raw, prefix) || len(prefix) != len(keyPrefix)+lookupLen || !strings.HasPrefix(prefix, keyPrefix) {
			t.Fatalf("bearerKey(%q) = %q, %q", h, raw, prefix)
		}
	})
}

// FuzzRequestID: whatever the caller sends, the id used is sane.
func FuzzRequestID(f *testing.F) {
	f.Add("req-123")
	f.Add("bad id <script>")
	f.Add(strings.Repeat("a", 200))
	f.Fuzz(func(t *testing.T, in string) {
		id := requestID(in)
		if id == "" || len(id) > 128 || strings.ContainsAny(id, " \r\n\t<>\"") {
			t.Fatalf("requestID(%q) = %q", in, id)
		}
	})
}

// FuzzVerifyToken: whatever bearer token arrives, verification neither
// panics nor accepts it (nothing but the issuer's key signs a valid one).
func FuzzVerifyToken(f *testing.F) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		f.Fatal(err)
	}
	jwks, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	if err != nil {
		f.Fatal(err)
	}
	v, err := newTokenVerifier(busapi.OIDCEntry{Issuer: "https://idp.example.com", Audience: "modelplane", JWKS: jwks}, quartz.NewMock(f))
	if err != nil {
		f.Fatal(err)
	}
	g := &Gateway{}
	g.identity.Store(&identityTable{oidc: v, members: map[string]*busapi.MemberEntry{}})
	f.Add("Bearer eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0.eyJpc3MiOiJodHRwczovL2lkcC5leGFtcGxlLmNvbSIsInN1YiI6ImEifQ.c2ln")
	f.Add("Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.")
	f.Add("Bearer a.b.c")
	f.Add("bearer ..")
	f.Fuzz(func(t *testing.T, h string) {
		tok, ok := bearerToken(h)
		if !ok {
			return
		}
		if strings.Count(tok, ".") != 2 || len(tok) > maxTokenBytes {
			t.Fatalf("bearerToken(%q) = %q, not a JWT shape", h, tok)
		}
		if c, ok := g.verifyToken(t.Context(), tok); ok {
			t.Fatalf("verifyToken(%q) accepted a forged token: %+v", tok, c)
		}
	})
}
