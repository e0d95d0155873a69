package gateway

import (
	"errors"
	"io"
	"log/slog"
	"net/http"

	"modelplane/gateway/kserve"
)

// maxV2Answer bounds the V2 answer the gateway reads to translate: it is
// held whole, unlike a relayed answer.
const maxV2Answer = 16 << 20

// v2Request translates a predict body for v when its runtime speaks only
// the V2 protocol (package kserve). It returns the body and path to send
// and the number of instances; ok is false when the request was answered
// (400 naming the value a tensor cannot carry, or 500 when the request
// cannot be built).
func (g *Gateway) v2Request(w http.ResponseWriter, c *call, v *version, k kind, body []byte) (out []byte, path string, n int, ok bool) {
	if v.v2 == nil {
		return body, k.upstreamPath(), 0, true
	}
	out, n, err := v.v2.Request(body, c.id)
	var bad *kserve.InputError
	switch {
	case errors.As(err, &bad):
		g.fail(w, c, http.StatusBadRequest, "invalid input", bad.Error())
		return nil, "", 0, false
	case err != nil:
		g.fail(w, c, http.StatusInternalServerError, "endpoint misconfigured", "version "+v.name+": "+err.Error())
		return nil, "", 0, false
	}
	return out, v.v2.Path(), n, true
}

// v2Answer reads a V2 answer to n instances and answers the caller in the
// platform's predict shape: 200 with the translated predictions, the
// runtime's own status with its message otherwise, 502 when a 200 cannot
// be translated.
func (g *Gateway) v2Answer(rc *replicaCall, c *call, rt *route, v *version, n int, resp *http.Response, w http.ResponseWriter) {
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxV2Answer+1))
	if err == nil && len(b) > maxV2Answer {
		err = errors.New("answer too large")
	}
	if err != nil {
		switch {
		case rc.timedOut():
			g.fail(w, c, http.StatusGatewayTimeout, "upstream timeout", "the replica did not answer within "+rt.timeout.String())
		case rc.ended():
			c.status = 499 // the caller went away; nobody reads an answer
		default:
			g.fail(w, c, http.StatusBadGateway, "bad gateway", "the replica failed to answer")
		}
		return
	}
	if resp.StatusCode != http.StatusOK {
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			w.Header().Set("Retry-After", ra)
		}
		g.fail(w, c, resp.StatusCode, http.StatusText(resp.StatusCode), "the runtime answered: "+kserve.ErrorMessage(b))
		return
	}
	out, err := v.v2.Response(b, n, v.name)
	if err != nil {
		g.log.Warn("gateway: untranslatable V2 answer", slog.String("request_id", c.id), slog.String("version", v.name), slog.String("error", err.Error()))
		g.fail(w, c, http.StatusBadGateway, "bad gateway", "the replica's V2 answer does not fit the request")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	c.status = http.StatusOK
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(out); err != nil {
		c.sampled = false
		return
	}
	if c.sampled && len(out) <= maxSampledAnswer {
		c.sampleOf.answer = out
	}
}
