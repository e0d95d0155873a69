package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"

	"modelplane/busapi"
	"modelplane/tracing"
)

// rolePlatformAdmin is the org-wide role that may call every endpoint.
const rolePlatformAdmin = "platform_admin"

// call is what the gateway learnt about one request, for its log line.
type call struct {
	id       string
	idh      []string // id as a header value (idHeader)
	endpoint string
	team     string
	key      string
	// ver is the version chosen, nil until there is one; it keeps the
	// handles of its statistics series and metrics.
	ver     *version
	replica string
	status  int
	retried bool
	// rc is the call to the replica (proxy), kept here to save an
	// allocation a request.
	rc replicaCall

	// owner is the endpoint's team, for the statistics.
	owner string
	// grant is set when the caller calls another team's endpoint through
	// a grant to its team (team); nil for the owners' own calls.
	grant *grant
	// streamed is set once an event stream is relayed; firstEvent is when
	// its first event was written and tokens the completion tokens seen.
	streamed   bool
	firstEvent time.Time
	tokens     int
	// hideUsage is set when the gateway, not the caller, asked the
	// replica for a stream's usage (askUsage): the relay keeps that
	// event from the caller.
	hideUsage bool

	// start is when the gateway got the request; upstream the time spent
	// waiting on replicas (zero when none was called), for the metrics.
	start    time.Time
	upstream time.Duration
	// sampled is set when the request is sampled; sampleOf then holds what
	// the sample needs (see sample.go), never logged.
	sampled  bool
	sampleOf pending
	// pinned is set when X-Model-Version chose the version; its statistics
	// and samples are then marked, and the judge and drift skip them.
	pinned bool
	// endpointID is the routing entry's endpoint id, for statistics and
	// samples.
	endpointID int64
	// openai is set on the OpenAI routes (openai.go): the body's model
	// names the endpoint, and errors have OpenAI's shape.
	openai bool
	// step is set on a graph's step (graph.go), served for the graph's
	// team, stepWho, rather than for a key of its own.
	step    bool
	stepWho *caller
	// via is the graph endpoint and version a step is made for (graph.go);
	// its statistics are a series of their own, for chargeback.
	via graphRef
	// llmAnswer is set on a graph whose last step called an LLM endpoint:
	// its answer is a chat completion, sampled as one (graph.go).
	llmAnswer bool
	// spanCtx is the request's root span's context (trace.go), valid when
	// the request has a trace, and span the span while it records (from
	// spans, so that a request that is not traced carries no span's
	// kilobyte); traceparent is its W3C header value, and
	// traceID that header's trace id for the log line and the exemplars;
	// tp holds that value, so that the header's slice costs no allocation
	// of its own, and tpExtra the unary client's header lines of the trace
	// (unaryRequestOf); tracing is set when the span records, and marks then
	// hold how long after start each of the first marked steps of the
	// path ended; requests records it and tracer makes its children.
	spanCtx     trace.SpanContext
	span        *tracing.RequestSpan
	requests    *tracing.Recorder
	tracer      trace.Tracer
	traceparent []string
	tp          [1]string
	traceID     string
	tracing     bool
	marks       [steps]time.Duration
	marked      int
}

// inferenceCall serves one inference request of kind k to endpoint (empty
// on the OpenAI routes, which name it in the body's model).
func (g *Gateway) inferenceCall(k kind, openai bool, endpoint string, w http.ResponseWriter, r *http.Request) {
	c := &call{id: requestID(r.Header.Get("X-Request-Id")), endpoint: endpoint, start: time.Now(), openai: openai}
	g.handle(k, c, w, r)
}

// handle serves one request described by c, from the start of its trace to
// its statistics and log line: the public routes' and a graph step's
// (graph.go) alike, so that a step is counted, limited and traced as any
// call.
func (g *Gateway) handle(k kind, c *call, w http.ResponseWriter, r *http.Request) {
	start := c.start
	w.Header()["X-Request-Id"] = c.idHeader()
	g.startTrace(w, c, r)
	g.serve(k, c, w, r)
	end := time.Now()
	c.endTrace(end)
	// A 202 of a scaled-to-zero endpoint measured nothing of a version.
	if c.ver != nil && c.status != http.StatusAccepted {
		o := observation{endpoint: c.endpoint, team: c.owner, version: c.ver.name, status: c.status,
			duration: end.Sub(start), streamed: c.streamed && !c.firstEvent.IsZero(), tokens: c.tokens, pinned: c.pinned, endpointID: c.endpointID,
			id: c.id, traceID: c.traceID, replica: c.replica, end: end, upstream: c.upstream, sampled: c.sampled && c.status == http.StatusOK}
		if c.grant != nil {
			o.caller = c.team
		}
		o.via = c.via
		if o.streamed {
			o.ttft = c.firstEvent.Sub(start)
		}
		c.ver.record(g.stats, &o)
	}
	if c.ver != nil {
		g.metrics.observe(c, end.Sub(start))
	}
	if c.sampled && c.status == http.StatusOK {
		g.offerSample(c, k, end)
	}
	// Checked first: the attributes would be built (and the slice
	// allocated) for a discarded line otherwise.
	if !g.log.Enabled(r.Context(), slog.LevelInfo) {
		return
	}
	g.log.LogAttrs(r.Context(), slog.LevelInfo, "request",
		slog.String("request_id", c.id), slog.String("route", r.Pattern), slog.String("endpoint", c.endpoint),
		slog.String("team", c.team), slog.String("key", c.key), slog.String("version", c.versionName()),
		slog.String("replica", c.replica), slog.Bool("retried", c.retried), slog.Int("status", c.status), slog.String("trace_id", c.traceID),
		slog.Float64("duration_ms", float64(end.Sub(start).Microseconds())/1000))
}

// idHeader is the request id as a header value, made once for the answer
// and the call to the replica.
func (c *call) idHeader() []string {
	if c.idh == nil {
		c.idh = []string{c.id}
	}
	return c.idh
}

// versionName is the name of the version chosen, "" before there is one.
func (c *call) versionName() string {
	if c.ver == nil {
		return ""
	}
	return c.ver.name
}

func (g *Gateway) fail(w http.ResponseWriter, c *call, status int, title, detail string) {
	c.status = status
	if c.openai {
		openaiError(w, status, title, detail)
		return
	}
	problem(w, status, title, detail, c.id)
}

// serve runs the request path: authenticate, authorise, read and check the
// body, choose a version and a replica, proxy.
func (g *Gateway) serve(k kind, c *call, w http.ResponseWriter, r *http.Request) {
	who, ok := g.authenticate(w, c, r)
	if !ok {
		return
	}
	c.key, c.team = who.name, who.team
	c.mark(stepAuthn)
	// The OpenAI routes name the endpoint in the body's model, so the body
	// is read first there.
	var body []byte
	if c.openai {
		if body, ok = g.readBody(w, c, r); !ok {
			return
		}
		if c.endpoint, ok = g.modelOf(w, c, body); !ok {
			return
		}
	}
	rt := g.routes.Load().byName[c.endpoint]
	if rt != nil {
		c.owner, c.endpointID = rt.src.Team, rt.src.EndpointID
		if who.may(rt.src.Team) {
			if who.token {
				c.team = rt.src.Team
			}
		} else if c.grant = rt.grantOf(who); c.grant != nil {
			c.team = c.grant.src.Team
		}
	}
	// Another team's endpoint answers exactly like one that does not
	// exist, unless the owners granted the caller's team access.
	if rt == nil || (!who.may(rt.src.Team) && c.grant == nil) {
		g.fail(w, c, http.StatusNotFound, "not found", "no endpoint "+strconv.Quote(c.endpoint))
		return
	}
	if (rt.src.Task == "llm") != k.llm() {
		what := "predict"
		if rt.src.Task == "llm" {
			what = "chat/completions and completions"
		}
		g.fail(w, c, http.StatusNotFound, "not found", "endpoint "+strconv.Quote(c.endpoint)+" serves "+what)
		return
	}
	if body == nil {
		if body, ok = g.readBody(w, c, r); !ok {
			return
		}
	}
	// Most predict bodies are checked from their bytes; the rest, and
	// every failure, take the full path, which says what is wrong.
	var stream bool
	if !rt.accepts(k, body) {
		var err error
		if stream, err = decodeRequest(k, body); err != nil {
			g.fail(w, c, http.StatusBadRequest, "bad request", strings.TrimPrefix(err.Error(), errBadRequest.Error()+"\n"))
			return
		}
		if bad := g.validate(rt, k, body); bad != nil {
			g.fail(w, c, http.StatusBadRequest, "invalid input", bad.Error())
			return
		}
	}
	c.mark(stepSchema)
	if !g.admit(w, c, rt) {
		return
	}
	if !g.admitGrantQuota(r.Context(), w, c, rt, g.now()) {
		return
	}
	// Version choice: a pin first, then the experiment's arm of the user,
	// then the weighted split.
	var v *version
	if pin := r.Header.Get("X-Model-Version"); pin != "" {
		// A version that takes no traffic answers like one that does not
		// exist: pins are for reaching what serves, and, with the explicit
		// flag, the endpoint's shadow (its owners testing it).
		shadow := r.Header.Get("X-Model-Version-Shadow") == "true"
		if v = rt.byName[pin]; v == nil || !v.pinnable(shadow) {
			g.fail(w, c, http.StatusNotFound, "not found", "endpoint "+strconv.Quote(c.endpoint)+" has no version "+strconv.Quote(pin)+" that takes traffic")
			return
		}
		c.pinned = true
	} else {
		if user := r.Header.Get("X-User-Id"); user != "" && rt.experiment != nil {
			v = rt.experiment.assign(user)
		}
		if v == nil {
			if v = rt.pick(); v == nil {
				g.unavailable(w, c, "no version of this endpoint takes traffic")
				return
			}
		}
	}
	c.ver = v
	c.mark(stepRouting)
	// A granted team's requests are sampled only when its grant says so.
	// A graph is sampled as any endpoint, its answer the graph's output.
	if c.sampled = (c.grant == nil || c.grant.src.Sampling) && g.samples.draw(rt.src.SamplingRate); c.sampled {
		c.sampleOf.body, c.sampleOf.features = body, rt.src.FeatureNames
	}
	if rt.src.Task == busapi.RouteTaskGraph {
		// A graph runs here: its version has no replica to wake or hold.
		w.Header().Set("X-Model-Version", v.name)
		g.runGraph(c, rt, v, body, w, r)
		return
	}
	// An endpoint scaled to zero with no replica of v: the request waits
	// for one within the endpoint's cold-start budget (hold.go).
	if rt.src.ScaledToZero && rt.src.Blocked == "" && len(v.upstreams) == 0 {
		g.wake(&rt.src, true)
		_, hs := c.child(r.Context(), "ml_serving.scale_from_zero_wait", trace.SpanKindInternal)
		rt, v, ok = g.hold(w, c, r, rt, v)
		if hs != nil {
			hs.End()
		}
		if !ok {
			return
		}
		c.ver = v
	}
	// A pinned request is the caller's choice, not a sample of the split:
	// it is not mirrored to the shadows either, whose statistics the judge
	// reads.
	if len(rt.shadows) > 0 && !c.pinned {
		g.mirror(k, c, rt, v, body, stream, r.Header.Get("Accept"))
	}
	w.Header()["X-Model-Version"] = v.nameHeader
	g.proxy(k, c, rt, v, body, stream, w, r)
}

// readBody reads the request body within MaxBodyBytes and ReadTimeout,
// answering 413 or 400 when it cannot.
func (g *Gateway) readBody(w http.ResponseWriter, c *call, r *http.Request) ([]byte, bool) {
	if r.ContentLength > g.cfg.MaxBodyBytes {
		g.fail(w, c, http.StatusRequestEntityTooLarge, "request body too large", "the limit is "+strconv.FormatInt(g.cfg.MaxBodyBytes, 10)+" bytes")
		return nil, false
	}
	// Reading the body is bounded (headers have the server's
	// ReadHeaderTimeout); the deadline goes once the body is in, because on
	// HTTP/1 the server then reads the connection to notice the caller
	// leave, and a deadline passing there would cancel a long or streamed
	// answer. It stays after a failed read: the server would otherwise wait
	// for the rest of the body before answering. An error means the writer
	// sets no deadlines (a test recorder).
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(g.cfg.ReadTimeout))
	var body []byte
	var err error
	if r.ContentLength >= 0 {
		// A known length within the limit (checked above): one buffer of
		// it, where reading to the end would grow one.
		body = make([]byte, r.ContentLength)
		_, err = io.ReadFull(r.Body, body)
	} else {
		body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxBodyBytes))
	}
	if err == nil {
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			g.fail(w, c, http.StatusRequestEntityTooLarge, "request body too large", "the limit is "+strconv.FormatInt(g.cfg.MaxBodyBytes, 10)+" bytes")
			return nil, false
		}
		g.fail(w, c, http.StatusBadRequest, "bad request", "cannot read the request body")
		return nil, false
	}
	return body, true
}

// authenticate checks the API key or OIDC bearer token of a request
// locally, answering 401 when there is none or it is invalid.
func (g *Gateway) authenticate(w http.ResponseWriter, c *call, r *http.Request) (*caller, bool) {
	// A graph's step is its graph's team calling (graph.go); only the
	// gateway makes step calls, never a request.
	if c.step {
		return c.stepWho, true
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		// A client certificate is the request's credential (service.go).
		return g.authenticateCert(w, c, r.TLS)
	}
	header := r.Header.Get("Authorization")
	if raw, prefix, ok := bearerKey(header); ok {
		key := g.keys.Load().byPrefix[prefix]
		if key == nil || !key.matches(keyDigest(raw)) ||
			(key.expiresAt != nil && !g.now().Before(*key.expiresAt)) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="modelplane", error="invalid_token"`)
			g.fail(w, c, http.StatusUnauthorized, "unauthenticated", "the API key is unknown, revoked or expired")
			return nil, false
		}
		if key.who.name == prefix {
			return &key.who, true // the entry names itself by its key, as it should
		}
		return &caller{name: prefix, team: key.team, role: key.role}, true
	}
	if token, ok := bearerToken(header); ok {
		who, ok := g.verifyToken(r.Context(), token)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="modelplane", error="invalid_token"`)
			g.fail(w, c, http.StatusUnauthorized, "unauthenticated", "the token is invalid, expired or not from the configured issuer")
			return nil, false
		}
		return who, true
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="modelplane"`)
	g.fail(w, c, http.StatusUnauthorized, "unauthenticated", "send an API key (Authorization: Bearer mpk_...) or an OIDC token")
	return nil, false
}

// keyDigest is the SHA-256 of an API key of bearerKey's shape, hashed
// from a copy on the stack: the key is longer than what a conversion to
// bytes keeps there, so hashing []byte(raw) allocates.
func keyDigest(raw string) [32]byte {
	var b [len(keyPrefix) + lookupLen + 1 + secretLen]byte
	return sha256.Sum256(b[:copy(b[:], raw)])
}

func (g *Gateway) unavailable(w http.ResponseWriter, c *call, detail string) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(g.cfg.RetryAfter.Round(time.Second)/time.Second))))
	g.fail(w, c, http.StatusServiceUnavailable, "no replica ready", detail)
}

// coldStart answers a request to an endpoint scaled to zero, after it
// waited that long (hold.go): 202 with a Retry-After from the measured cold
// start of v, so that a client polls instead of treating it as an outage.
// The wake request that starts a replica went out already (wake.go).
func (g *Gateway) coldStart(w http.ResponseWriter, c *call, v *version, waited time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(g.retryAfter(v, waited)))
	g.fail(w, c, http.StatusAccepted, "scaled to zero", "endpoint "+strconv.Quote(c.endpoint)+" has no replica running; retry later")
}

// hopHeader reports whether name (canonical) is a connection-level header
// a proxy must not pass on.
func hopHeader(name string) bool {
	switch name {
	case "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// proxy sends the request to the least loaded replica of v, retrying once on
// another replica when the first could not be connected to (so nothing was
// sent), and relays the answer.
func (g *Gateway) proxy(k kind, c *call, rt *route, v *version, body []byte, stream bool, w http.ResponseWriter, r *http.Request) {
	rc := &c.rc
	rc.begin(r.Context(), time.Now().Add(rt.timeout))
	defer rc.end()
	body, path, instances, ok := g.v2Request(w, c, v, k, body)
	if !ok {
		return
	}
	if stream {
		body, c.hideUsage = askUsage(body)
	}

	u, saturated := v.acquire(nil, g.cfg.MaxOutstandingPerReplica, g.now().UnixNano())
	if u == nil && !saturated && rt.src.Blocked != "" {
		// A blocking budget holds the endpoint at zero: no wake would
		// start a replica, so a 202 would have the caller poll in vain.
		g.fail(w, c, http.StatusServiceUnavailable, "budget exceeded", "endpoint "+strconv.Quote(c.endpoint)+" is held at zero replicas: "+rt.src.Blocked)
		return
	}
	g.wake(&rt.src, u == nil && !saturated)
	if u == nil {
		if saturated {
			g.shed(w, c)
			return
		}
		if rt.src.ScaledToZero {
			g.coldStart(w, c, v, 0)
			return
		}
		g.unavailable(w, c, "version "+strconv.Quote(v.name)+" has no ready replica")
		return
	}
	sent := time.Now()
	defer func() { c.upstream = time.Since(sent) }()
	resp, err := g.send(rc, path, u, body, stream, c, r)
	if err != nil && (dialFailed(err) || unanswered(err)) && !rc.ended() {
		g.outcome(v, u, true)
		u.inFlight.Add(-1)
		if next, _ := v.acquire(u, g.cfg.MaxOutstandingPerReplica, g.now().UnixNano()); next != nil {
			c.retried = true
			u = next
			resp, err = g.send(rc, path, u, body, stream, c, r)
		} else {
			u = nil
		}
	}
	if u != nil {
		defer u.inFlight.Add(-1)
		c.replica = u.id
	}
	if u != nil {
		// Neither a timeout nor the caller's going away says the replica
		// is broken; a refused connection, a broken answer or a 502, 503 or
		// 504 does. A 500 is the model's answer to one input: counting it
		// would let one caller with poison inputs eject healthy replicas.
		if err != nil {
			if !rc.ended() {
				g.outcome(v, u, true)
			}
		} else {
			g.outcome(v, u, replicaFailed(resp.StatusCode))
		}
	}
	if err != nil {
		switch {
		case rc.timedOut():
			g.fail(w, c, http.StatusGatewayTimeout, "upstream timeout", "the replica did not answer within "+rt.timeout.String())
		case rc.ended():
			c.status = 499 // the caller went away; nobody reads an answer
		case u == nil || dialFailed(err):
			g.unavailable(w, c, "no replica of version "+strconv.Quote(v.name)+" could be reached")
		default:
			g.fail(w, c, http.StatusBadGateway, "bad gateway", "the replica failed to answer")
		}
		return
	}
	defer resp.Body.Close()
	if v.v2 != nil {
		g.v2Answer(rc, c, rt, v, instances, resp, w)
		return
	}
	// X-Model-Version and X-Request-Id are already the gateway's (serve
	// and handle set them): a replica's own are not passed on.
	h := w.Header()
	for name, vals := range resp.Header {
		if hopHeader(name) || name == "X-Model-Version" || name == "X-Request-Id" {
			continue
		}
		h[name] = vals
	}
	c.status = resp.StatusCode
	if stream && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// The stream has started: from here the stall timeout guards it,
		// not the request timeout.
		rc.timer.Stop()
		h.Del("Content-Length")
		c.streamed = true
		done := g.metrics.streaming(c.endpoint, v)
		g.relay(rc.ctx, rc.cancel, c, w, resp)
		done()
		return
	}
	w.WriteHeader(resp.StatusCode)
	dst := io.Writer(w)
	var kept *answerBuffer
	if c.sampled {
		kept = &answerBuffer{}
		dst = io.MultiWriter(w, kept)
	}
	buf := copyBufs.Get().(*[copyBufSize]byte)
	_, err = io.CopyBuffer(dst, resp.Body, buf[:])
	copyBufs.Put(buf)
	if err != nil && !rc.ended() {
		g.log.Debug("gateway: relay cut", slog.String("request_id", c.id), slog.String("error", err.Error()))
		c.sampled = false
	}
	if kept != nil && !kept.cut {
		c.sampleOf.answer = kept.buf.Bytes()
	}
}

// copyBufSize is the size of the buffers answers are relayed through.
const copyBufSize = 32 << 10

// copyBufs are the relay's buffers: io.Copy would allocate one per answer
// when the writer is not the server's own (a sampled answer is also kept).
var copyBufs = sync.Pool{New: func() any { return new([copyBufSize]byte) }}

// replicaCall is how a call to a replica ends early: at the route's
// timeout, or when the caller goes. The unary client takes both as they
// are, the request's context and a deadline (unary.go); a stream, or a
// call on net/http, gets a context of its own with a timer, made when
// first asked for.
type replicaCall struct {
	parent   context.Context
	deadline time.Time
	ctx      context.Context
	cancel   context.CancelFunc
	timer    *time.Timer
	fired    atomic.Bool
}

// begin starts the call, cut by parent's end or at deadline.
func (rc *replicaCall) begin(parent context.Context, deadline time.Time) {
	rc.parent, rc.deadline, rc.ctx, rc.cancel, rc.timer = parent, deadline, nil, nil, nil
	rc.fired.Store(false)
}

// context is the call's own context, cancelled at the deadline.
func (rc *replicaCall) context() context.Context {
	if rc.ctx == nil {
		rc.ctx, rc.cancel = context.WithCancel(rc.parent)
		rc.timer = time.AfterFunc(time.Until(rc.deadline), func() { rc.fired.Store(true); rc.cancel() })
	}
	return rc.ctx
}

// end releases the call's context, if it has one.
func (rc *replicaCall) end() {
	if rc.ctx != nil {
		rc.timer.Stop()
		rc.cancel()
	}
}

// timedOut reports whether the call was cut at its deadline.
func (rc *replicaCall) timedOut() bool {
	if rc.ctx != nil {
		return rc.fired.Load()
	}
	return passed(rc.deadline)
}

// ended reports whether the call was cut: timed out, or the caller gone.
func (rc *replicaCall) ended() bool { return rc.timedOut() || rc.parent.Err() != nil }

// send makes one upstream call to path. Only the headers set here reach
// the replica: none of the client's, so a client cannot set the team header.
//
// The request is built by hand rather than by http.NewRequest: the URL is
// parsed once per replica and path, and the header values that are the
// same on every call are shared slices (the transport only reads them).
//
// A call whose answer is not a stream goes through the gateway's own
// client (unary.go) when it has one and every header value is plain.
func (g *Gateway) send(rc *replicaCall, path string, u *upstream, body []byte, stream bool, c *call, in *http.Request) (*http.Response, error) {
	if g.unary != nil && !stream {
		if req, ok := unaryRequestOf(path, u, c, in); ok {
			return g.unary.roundTrip(rc.parent, rc.deadline, u.addr, &req, body)
		}
	}
	target, err := u.urlOf(g.scheme, path)
	if err != nil {
		return nil, err
	}
	req := (&http.Request{Method: http.MethodPost, URL: target, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: make(http.Header, 8), Host: target.Host, ContentLength: int64(len(body))}).WithContext(rc.context())
	req.Body, req.GetBody = bodyOf(body)
	req.Header["Content-Type"] = jsonContentType
	if a := in.Header["Accept"]; len(a) > 0 && a[0] != "" {
		req.Header["Accept"] = a[:1:1]
	}
	id := c.idHeader()
	req.Header["X-Request-Id"] = id
	// Marks the call replayable for net/http: a pooled connection the
	// replica closed (a replica stopping as its endpoint scales down) is
	// then retried on a fresh one instead of failing the request with a
	// 502; nothing of the request reached a model. A refused fresh
	// connection then moves the request to another replica (proxy).
	req.Header["X-Idempotency-Key"] = id
	c.inject(req.Header)
	upstreamHeaders(req.Header, u, c.team)
	return g.replicaTransport(u).RoundTrip(req)
}

// unaryRequestOf is the call send makes as the unary client's request,
// with the same headers; ok is false when a value is not plain (unary.go)
// and net/http should check it.
func unaryRequestOf(path string, u *upstream, c *call, in *http.Request) (req unaryRequest, ok bool) {
	req = unaryRequest{path: path, id: c.idHeader()[0], token: u.token, team: c.team}
	if a := in.Header["Accept"]; len(a) > 0 {
		req.accept = a[0]
	}
	if c.traceparent != nil {
		// What inject sets, without a header map a call.
		req.traceparent = c.traceparent[0]
		if ts := c.spanCtx.TraceState(); ts.Len() > 0 {
			req.tracestate = ts.String()
		}
	}
	return req, req.plain()
}

// jsonContentType is the Content-Type header value of every call.
var jsonContentType = []string{"application/json"}

// bodyOf is body as a request body and its GetBody, which lets net/http
// send it again on a fresh connection; nil for an empty body, as
// http.NewRequest makes them.
func bodyOf(body []byte) (io.ReadCloser, func() (io.ReadCloser, error)) {
	if len(body) == 0 {
		return http.NoBody, func() (io.ReadCloser, error) { return http.NoBody, nil }
	}
	return io.NopCloser(bytes.NewReader(body)), func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(body)), nil
	}
}

// upstreamHeaders sets what a replica believes of the gateway: its token,
// and the calling team it keys tenant fairness on.
func upstreamHeaders(h http.Header, u *upstream, team string) {
	if u.token != "" {
		h.Set(busapi.ReplicaTokenHeader, u.token)
	}
	h.Set(busapi.TeamHeader, team)
}

// dialFailed reports whether err happened while connecting, before any byte
// of the request was sent.
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// unanswered reports whether the replica closed or reset the connection
// (EOF, reset, broken pipe) before any byte of an answer: a replica being stopped as the endpoint
// scales down does so with a request on its way (net/http has already
// tried a fresh connection to it, the request carrying an idempotency
// key). Nothing reached the caller, so another replica may answer.
func unanswered(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		// net/http's own word for a reused connection the replica had
		// closed, which it has no exported error for.
		strings.Contains(err.Error(), "server closed idle connection")
}

// relay streams server-sent events to the client one by one, flushing after
// each. Events wait in a bounded buffer; a client that takes longer than the
// stall timeout to accept one is cut, and cancelling the upstream request
// makes the replica stop the generation and free its pages.
//
// The status line and headers go out with the first event, in one write,
// as httputil.ReverseProxy sends them: flushing them alone first cost a
// second write and a second wake-up of the client before it saw the first
// event, which is what time to first token measures. A stream that ends
// without an event gets its headers when the handler returns.
func (g *Gateway) relay(ctx context.Context, cancel context.CancelFunc, c *call, w http.ResponseWriter, resp *http.Response) {
	rc := http.NewResponseController(w)
	w.WriteHeader(resp.StatusCode)
	events := make(chan []byte, g.cfg.StreamBuffer)
	go func() {
		defer close(events)
		er := newEventReader(resp.Body)
		defer er.release()
		for {
			ev, err := er.next()
			if err != nil {
				return
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	defer func() {
		for range events { // let the reader end before the body closes
		}
	}()
	counted, final := 0, false
	defer func() { c.tokens = counted }()
	for ev := range events {
		if !final {
			n, f := streamTokens(ev)
			if f {
				counted, final = n, true
				if c.hideUsage && usageOnly(ev) {
					continue
				}
			} else {
				counted += n
			}
		}
		_ = rc.SetWriteDeadline(time.Now().Add(g.cfg.StallTimeout))
		if _, err := w.Write(ev); err != nil {
			cancel()
			return
		}
		if err := rc.Flush(); err != nil {
			cancel()
			return
		}
		if c.firstEvent.IsZero() {
			c.firstEvent = time.Now()
		}
	}
	_ = rc.SetWriteDeadline(time.Time{})
}
