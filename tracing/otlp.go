package tracing

import (
	"math"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// The OTLP trace protocol's field numbers (opentelemetry-proto,
// collector/trace/v1, trace/v1, resource/v1 and common/v1), which encode
// writes straight from the SDK's spans: the stock exporter first builds the
// protocol's Go structs (three allocations an attribute) and marshals them,
// which was most of what a traced request cost the gateway beyond the span
// itself (docs/operations.md).
const (
	fRequestResourceSpans = 1 // ExportTraceServiceRequest.resource_spans

	fResourceSpansResource  = 1
	fResourceSpansScopes    = 2
	fResourceSpansSchemaURL = 3

	fResourceAttributes = 1

	fScopeSpansScope     = 1
	fScopeSpansSpans     = 2
	fScopeSpansSchemaURL = 3

	fScopeName       = 1
	fScopeVersion    = 2
	fScopeAttributes = 3

	fSpanTraceID         = 1
	fSpanSpanID          = 2
	fSpanTraceState      = 3
	fSpanParentSpanID    = 4
	fSpanName            = 5
	fSpanKind            = 6
	fSpanStart           = 7
	fSpanEnd             = 8
	fSpanAttributes      = 9
	fSpanDroppedAttrs    = 10
	fSpanEvents          = 11
	fSpanDroppedEvents   = 12
	fSpanLinks           = 13
	fSpanDroppedLinks    = 14
	fSpanStatus          = 15
	fSpanFlags           = 16
	fEventTime           = 1
	fEventName           = 2
	fEventAttributes     = 3
	fEventDroppedAttrs   = 4
	fLinkTraceID         = 1
	fLinkSpanID          = 2
	fLinkTraceState      = 3
	fLinkAttributes      = 4
	fLinkDroppedAttrs    = 5
	fLinkFlags           = 6
	fStatusMessage       = 2
	fStatusCode          = 3
	fKeyValueKey         = 1
	fKeyValueValue       = 2
	fAnyString           = 1
	fAnyBool             = 2
	fAnyInt              = 3
	fAnyDouble           = 4
	fAnyArray            = 5
	fAnyKeyValueList     = 6
	fAnyBytes            = 7
	fArrayValues         = 1
	fKeyValueListValues  = 1
	fPartialSuccess      = 1 // ExportTraceServiceResponse.partial_success
	fPartialRejected     = 1
	fPartialErrorMessage = 2

	// Span flags: the low byte is the W3C trace flags; the two bits above
	// say that whether the parent was remote is known, and that it was.
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200

	// Status codes in OTLP (the SDK numbers them differently).
	statusOK    = 1
	statusError = 2
)

// encoder writes an ExportTraceServiceRequest into buf, which it keeps
// between batches.
type encoder struct {
	buf []byte
	// body and head are encodeRequests' buffers, reused: the export's
	// body, and the resource and scope written before it; sizes its
	// spans' sizes.
	body, head []byte
	sizes      []int
	// groups is the batch's resource and scope pairs, reused.
	groups []group
}

// group is a resource (told apart by its attributes, as the stock exporter
// does) and an instrumentation scope.
type group struct {
	res   attribute.Distinct
	scope instrumentation.Scope
}

func groupOf(s sdktrace.ReadOnlySpan) group {
	return group{res: s.Resource().Equivalent(), scope: s.InstrumentationScope()}
}

// encode returns spans as the body of one OTLP/HTTP export, valid until the
// next call.
func (e *encoder) encode(spans []sdktrace.ReadOnlySpan) []byte {
	e.buf = e.buf[:0]
	e.groups = e.groups[:0]
	first := make(map[attribute.Distinct]*resource.Resource, 1)
	for _, s := range spans {
		g := groupOf(s)
		if !slices.Contains(e.groups, g) {
			e.groups = append(e.groups, g)
		}
		if _, ok := first[g.res]; !ok {
			first[g.res] = s.Resource()
		}
	}
	for i, g := range e.groups {
		if slices.ContainsFunc(e.groups[:i], func(h group) bool { return h.res == g.res }) {
			continue // written with the first group of its resource
		}
		res := first[g.res]
		rs := e.open(fRequestResourceSpans)
		if res != nil {
			r := e.open(fResourceSpansResource)
			e.attrs(fResourceAttributes, res.Attributes())
			e.close(r)
		}
		for _, sg := range e.groups[i:] {
			if sg.res != g.res {
				continue
			}
			ss := e.open(fResourceSpansScopes)
			if sg.scope != (instrumentation.Scope{}) {
				sc := e.open(fScopeSpansScope)
				e.str(fScopeName, sg.scope.Name)
				e.str(fScopeVersion, sg.scope.Version)
				e.attrs(fScopeAttributes, sg.scope.Attributes.ToSlice())
				e.close(sc)
			}
			for _, s := range spans {
				if groupOf(s) == sg {
					e.span(s)
				}
			}
			e.str(fScopeSpansSchemaURL, sg.scope.SchemaURL)
			e.close(ss)
		}
		if res != nil {
			e.str(fResourceSpansSchemaURL, res.SchemaURL())
		}
		e.close(rs)
	}
	return e.buf
}

// encodeRequests returns a Recorder's spans, all of one resource and
// scope, as the body of one OTLP/HTTP export, valid until the next call:
// the same message encode writes for the SDK's spans of that resource and
// scope. Every length is known before its body is written (the spans'
// sizes are counted first), so no body is moved to make room for its
// length, as close does: the outer two messages hold the whole batch.
func (e *encoder) encodeRequests(res *resource.Resource, scope instrumentation.Scope, spans []RequestSpan) []byte {
	// The resource and the scope, small, are written apart first.
	e.buf = e.head[:0]
	if res != nil {
		r := e.open(fResourceSpansResource)
		e.attrs(fResourceAttributes, res.Attributes())
		e.close(r)
	}
	resourceEnd := len(e.buf)
	sc := e.open(fScopeSpansScope)
	e.str(fScopeName, scope.Name)
	e.str(fScopeVersion, scope.Version)
	e.attrs(fScopeAttributes, scope.Attributes.ToSlice())
	e.close(sc)
	e.head = e.buf

	e.sizes = e.sizes[:0]
	scopeSpans := len(e.head) - resourceEnd + strSize(fScopeSpansSchemaURL, scope.SchemaURL)
	for i := range spans {
		n := requestSpanSize(&spans[i])
		e.sizes = append(e.sizes, n)
		scopeSpans += protowire.SizeTag(fScopeSpansSpans) + protowire.SizeBytes(n)
	}
	resourceSpans := resourceEnd + protowire.SizeTag(fResourceSpansScopes) + protowire.SizeBytes(scopeSpans)
	if res != nil {
		resourceSpans += strSize(fResourceSpansSchemaURL, res.SchemaURL())
	}

	e.buf = e.body[:0]
	e.buf = protowire.AppendTag(e.buf, fRequestResourceSpans, protowire.BytesType)
	e.buf = protowire.AppendVarint(e.buf, uint64(resourceSpans))
	e.buf = append(e.buf, e.head[:resourceEnd]...)
	e.buf = protowire.AppendTag(e.buf, fResourceSpansScopes, protowire.BytesType)
	e.buf = protowire.AppendVarint(e.buf, uint64(scopeSpans))
	e.buf = append(e.buf, e.head[resourceEnd:]...)
	for i := range spans {
		e.requestSpan(&spans[i], e.sizes[i])
	}
	e.str(fScopeSpansSchemaURL, scope.SchemaURL)
	if res != nil {
		e.str(fResourceSpansSchemaURL, res.SchemaURL())
	}
	e.body = e.buf
	return e.buf
}

// requestSpanSize is the size of the Span message requestSpan writes for
// s, without its tag and length.
func requestSpanSize(s *RequestSpan) int {
	n := protowire.SizeTag(fSpanTraceID) + protowire.SizeBytes(len(trace.TraceID{})) +
		protowire.SizeTag(fSpanSpanID) + protowire.SizeBytes(len(trace.SpanID{})) +
		strSize(fSpanName, s.Name) + protowire.SizeTag(fSpanKind) + protowire.SizeVarint(uint64(trace.SpanKindServer)) +
		2*(protowire.SizeTag(fSpanStart)+protowire.SizeFixed64()) + s.used +
		protowire.SizeTag(fSpanStatus) + protowire.SizeBytes(statusSize(s)) + protowire.SizeTag(fSpanFlags) + protowire.SizeFixed32()
	if ts := s.Context.TraceState(); ts.Len() > 0 {
		n += strSize(fSpanTraceState, ts.String())
	}
	if s.Parent.SpanID().IsValid() {
		n += protowire.SizeTag(fSpanParentSpanID) + protowire.SizeBytes(len(trace.SpanID{}))
	}
	if d := clamp32(s.dropped); d != 0 {
		n += protowire.SizeTag(fSpanDroppedAttrs) + protowire.SizeVarint(d)
	}
	return n
}

// statusSize is the size of the Status message of s.
func statusSize(s *RequestSpan) int {
	if s.Error == "" {
		return 0
	}
	return strSize(fStatusMessage, s.Error) + protowire.SizeTag(fStatusCode) + protowire.SizeVarint(statusError)
}

// strSize is the size of a string field as str writes it.
func strSize(field protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(field) + protowire.SizeBytes(len(s))
}

// requestSpan writes s, whose message is size bytes (requestSpanSize), as
// span writes the SDK's: a server span with no events or links.
func (e *encoder) requestSpan(s *RequestSpan, size int) {
	e.buf = protowire.AppendTag(e.buf, fScopeSpansSpans, protowire.BytesType)
	e.buf = protowire.AppendVarint(e.buf, uint64(size))
	tid, sid := s.Context.TraceID(), s.Context.SpanID()
	e.bytes(fSpanTraceID, tid[:])
	e.bytes(fSpanSpanID, sid[:])
	if ts := s.Context.TraceState(); ts.Len() > 0 {
		e.str(fSpanTraceState, ts.String())
	}
	if psid := s.Parent.SpanID(); psid.IsValid() {
		e.bytes(fSpanParentSpanID, psid[:])
	}
	e.str(fSpanName, s.Name)
	e.varint(fSpanKind, uint64(trace.SpanKindServer))
	e.fixed64(fSpanStart, unixNano(s.Start.UnixNano()))
	e.fixed64(fSpanEnd, unixNano(s.End.UnixNano()))
	e.buf = append(e.buf, s.attrs[:s.used]...) // written as they were set
	e.varint(fSpanDroppedAttrs, clamp32(s.dropped))
	e.buf = protowire.AppendTag(e.buf, fSpanStatus, protowire.BytesType)
	e.buf = protowire.AppendVarint(e.buf, uint64(statusSize(s)))
	if s.Error != "" {
		e.str(fStatusMessage, s.Error)
		e.varint(fStatusCode, statusError)
	}
	e.fixed32(fSpanFlags, flags(s.Context.TraceFlags(), s.Parent.IsRemote()))
}

func (e *encoder) span(s sdktrace.ReadOnlySpan) {
	m := e.open(fScopeSpansSpans)
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	e.bytes(fSpanTraceID, tid[:])
	e.bytes(fSpanSpanID, sid[:])
	if ts := sc.TraceState(); ts.Len() > 0 {
		e.str(fSpanTraceState, ts.String())
	}
	parent := s.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		e.bytes(fSpanParentSpanID, psid[:])
	}
	e.str(fSpanName, s.Name())
	if k := s.SpanKind(); k >= trace.SpanKindInternal && k <= trace.SpanKindConsumer {
		// The SDK's kinds carry OTLP's numbers, unspecified being 0 in both.
		e.varint(fSpanKind, uint64(k))
	}
	e.fixed64(fSpanStart, unixNano(s.StartTime().UnixNano()))
	e.fixed64(fSpanEnd, unixNano(s.EndTime().UnixNano()))
	e.attrs(fSpanAttributes, s.Attributes())
	e.varint(fSpanDroppedAttrs, clamp32(s.DroppedAttributes()))
	for _, ev := range s.Events() {
		em := e.open(fSpanEvents)
		e.fixed64(fEventTime, unixNano(ev.Time.UnixNano()))
		e.str(fEventName, ev.Name)
		e.attrs(fEventAttributes, ev.Attributes)
		e.varint(fEventDroppedAttrs, clamp32(ev.DroppedAttributeCount))
		e.close(em)
	}
	e.varint(fSpanDroppedEvents, clamp32(s.DroppedEvents()))
	for _, l := range s.Links() {
		lm := e.open(fSpanLinks)
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		e.bytes(fLinkTraceID, ltid[:])
		e.bytes(fLinkSpanID, lsid[:])
		if ts := l.SpanContext.TraceState(); ts.Len() > 0 {
			e.str(fLinkTraceState, ts.String())
		}
		e.attrs(fLinkAttributes, l.Attributes)
		e.varint(fLinkDroppedAttrs, clamp32(l.DroppedAttributeCount))
		e.fixed32(fLinkFlags, flags(l.SpanContext.TraceFlags(), l.SpanContext.IsRemote()))
		e.close(lm)
	}
	e.varint(fSpanDroppedLinks, clamp32(s.DroppedLinks()))
	// The status is written even when unset, as the stock exporter does.
	st := s.Status()
	stm := e.open(fSpanStatus)
	e.str(fStatusMessage, st.Description)
	switch st.Code {
	case codes.Ok:
		e.varint(fStatusCode, statusOK)
	case codes.Error:
		e.varint(fStatusCode, statusError)
	}
	e.close(stm)
	e.fixed32(fSpanFlags, flags(sc.TraceFlags(), parent.IsRemote()))
	e.close(m)
}

func flags(tf trace.TraceFlags, remote bool) uint32 {
	f := uint32(tf) | flagHasIsRemote
	if remote {
		f |= flagIsRemote
	}
	return f
}

func unixNano(n int64) uint64 { return uint64(max(n, 0)) }

func clamp32(n int) uint64 { return uint64(min(max(n, 0), math.MaxUint32)) }

func (e *encoder) attrs(field protowire.Number, kvs []attribute.KeyValue) {
	for i := range kvs {
		kv := &kvs[i]
		e.buf = slices.Grow(e.buf, maxShort)
		if k, ok := putShort(e.buf[len(e.buf):cap(e.buf)], field, kv); ok {
			e.buf = e.buf[:len(e.buf)+k]
			continue
		}
		if size, ok := keyValueSize(*kv); ok {
			e.buf = appendKeyValue(e.buf, field, *kv, size)
			continue
		}
		m := e.open(field)
		e.str(fKeyValueKey, string(kv.Key))
		v := e.open(fKeyValueValue)
		e.value(kv.Value)
		e.close(v)
		e.close(m)
	}
}

// keyValueSize is the size of kv's KeyValue message when its value is no
// list or map: its sizes are then known before it is written, and no body
// moves to make room for a length.
func keyValueSize(kv attribute.KeyValue) (int, bool) {
	n, ok := scalarSize(kv.Value)
	if !ok {
		return 0, false
	}
	size := 1 + protowire.SizeVarint(uint64(n)) + n
	if kv.Key != "" {
		size += 1 + protowire.SizeBytes(len(kv.Key))
	}
	return size, true
}

// Tags of a KeyValue's fields and of an AnyValue's scalars, each one byte.
const (
	tagKey    = byte(fKeyValueKey<<3 | protowire.BytesType)
	tagValue  = byte(fKeyValueValue<<3 | protowire.BytesType)
	tagString = byte(fAnyString<<3 | protowire.BytesType)
	tagBool   = byte(fAnyBool<<3 | protowire.VarintType)
	tagInt    = byte(fAnyInt<<3 | protowire.VarintType)
)

// maxShort is the most bytes putShort writes: a field's tag and length,
// and a message under 128 bytes.
const maxShort = 2 + 127

// putShort writes kv as a KeyValue message in field at the start of dst
// when it is a string, an integer or a bool with a key whose message is
// under 128 bytes, and there is room: every length then takes one byte,
// so its sizes are worked out once and its bytes written in place. It
// returns how many bytes it wrote, and false (having written nothing)
// for any other attribute, which appendKeyValue or the general path
// writes as the same bytes. The gateway's request span attributes all
// are short.
func putShort(dst []byte, field protowire.Number, kv *attribute.KeyValue) (int, bool) {
	switch kv.Value.Type() {
	case attribute.STRING:
		return putShortString(dst, field, string(kv.Key), kv.Value.AsString())
	case attribute.INT64:
		return putShortInt(dst, field, string(kv.Key), kv.Value.AsInt64())
	case attribute.BOOL:
		return putShortBool(dst, field, string(kv.Key), kv.Value.AsBool())
	}
	return 0, false
}

// putShortString, putShortInt and putShortBool are putShort for a value
// of their type: a RequestSpan's typed setters call them without an
// attribute.KeyValue.
func putShortString(dst []byte, field protowire.Number, key, v string) (int, bool) {
	k, ok := shortHead(dst, field, key, 2+len(v))
	if !ok {
		return 0, false
	}
	dst[k], dst[k+1] = tagString, byte(len(v))
	return k + 2 + copy(dst[k+2:], v), true
}

func putShortInt(dst []byte, field protowire.Number, key string, v int64) (int, bool) {
	k, ok := shortHead(dst, field, key, 1+protowire.SizeVarint(uint64(v)))
	if !ok {
		return 0, false
	}
	dst[k] = tagInt
	return k + 1 + len(protowire.AppendVarint(dst[k+1:k+1], uint64(v))), true
}

func putShortBool(dst []byte, field protowire.Number, key string, v bool) (int, bool) {
	k, ok := shortHead(dst, field, key, 2)
	if !ok {
		return 0, false
	}
	dst[k], dst[k+1] = tagBool, byte(protowire.EncodeBool(v))
	return k + 2, true
}

// shortHead writes the head of a short KeyValue message whose AnyValue is
// n bytes (putShort): field's tag, the message's length, the key and the
// value's tag and length. It returns where the value goes, and false,
// having written nothing, when the message would be 128 bytes or more,
// the key is empty or dst has no room.
func shortHead(dst []byte, field protowire.Number, key string, n int) (int, bool) {
	size := 2 + len(key) + 2 + n
	if field >= 16 || len(key) == 0 || size >= 128 || 2+size > len(dst) {
		return 0, false
	}
	dst[0], dst[1], dst[2], dst[3] = byte(protowire.EncodeTag(field, protowire.BytesType)), byte(size), tagKey, byte(len(key))
	k := 4 + copy(dst[4:], key)
	dst[k], dst[k+1] = tagValue, byte(n)
	return k + 2, true
}

// appendKeyValue appends kv, whose KeyValue message is size bytes
// (keyValueSize), as field.
func appendKeyValue(b []byte, field protowire.Number, kv attribute.KeyValue, size int) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	if kv.Key != "" {
		b = append(b, tagKey)
		b = protowire.AppendVarint(b, uint64(len(kv.Key)))
		b = append(b, kv.Key...)
	}
	n, _ := scalarSize(kv.Value)
	b = append(b, tagValue)
	b = protowire.AppendVarint(b, uint64(n))
	return appendScalar(b, kv.Value)
}

// scalarSize is the size of v's AnyValue when v is no list or map.
func scalarSize(v attribute.Value) (int, bool) {
	switch v.Type() {
	case attribute.EMPTY:
		return 0, true
	case attribute.BOOL:
		return 2, true
	case attribute.INT64:
		return 1 + protowire.SizeVarint(uint64(v.AsInt64())), true
	case attribute.FLOAT64:
		return 1 + 8, true
	case attribute.STRING:
		return 1 + protowire.SizeBytes(len(v.AsString())), true
	}
	return 0, false
}

// appendScalar appends the field of v's AnyValue, v no list or map;
// nothing for an empty value.
func appendScalar(b []byte, v attribute.Value) []byte {
	switch v.Type() {
	case attribute.BOOL:
		b = protowire.AppendTag(b, fAnyBool, protowire.VarintType)
		b = protowire.AppendVarint(b, protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		b = protowire.AppendTag(b, fAnyInt, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		b = protowire.AppendTag(b, fAnyDouble, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		b = protowire.AppendTag(b, fAnyString, protowire.BytesType)
		b = protowire.AppendString(b, v.AsString())
	}
	return b
}

// keyValueOf reads back a KeyValue message appendKeyValue wrote.
func keyValueOf(m []byte) attribute.KeyValue {
	kv := attribute.KeyValue{Key: attribute.Key(field(m, fKeyValueKey))}
	v := field(m, fKeyValueValue)
	num, _, k := protowire.ConsumeTag(v)
	if k < 0 {
		return kv // an empty value
	}
	v = v[k:]
	switch num {
	case fAnyBool:
		x, _ := protowire.ConsumeVarint(v)
		kv.Value = attribute.BoolValue(protowire.DecodeBool(x))
	case fAnyInt:
		x, _ := protowire.ConsumeVarint(v)
		kv.Value = attribute.Int64Value(int64(x))
	case fAnyDouble:
		x, _ := protowire.ConsumeFixed64(v)
		kv.Value = attribute.Float64Value(math.Float64frombits(x))
	case fAnyString:
		x, _ := protowire.ConsumeBytes(v)
		kv.Value = attribute.StringValue(string(x))
	}
	return kv
}

// value writes the fields of an AnyValue (the caller opened it).
func (e *encoder) value(v attribute.Value) {
	switch v.Type() {
	case attribute.BOOL, attribute.INT64, attribute.FLOAT64, attribute.STRING:
		e.buf = appendScalar(e.buf, v)
	case attribute.BYTESLICE:
		e.buf = protowire.AppendTag(e.buf, fAnyBytes, protowire.BytesType)
		e.buf = protowire.AppendBytes(e.buf, v.AsByteSlice())
	case attribute.BOOLSLICE:
		array(e, v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		array(e, v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		array(e, v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		array(e, v.AsStringSlice(), attribute.StringValue)
	case attribute.SLICE:
		a := e.open(fAnyArray)
		for _, x := range v.AsSlice() {
			m := e.open(fArrayValues)
			e.value(x)
			e.close(m)
		}
		e.close(a)
	case attribute.MAP:
		a := e.open(fAnyKeyValueList)
		e.attrs(fKeyValueListValues, v.AsMap())
		e.close(a)
	}
	// EMPTY: an AnyValue with no value set.
}

// array writes xs as an AnyValue's array_value.
func array[T any](e *encoder, xs []T, of func(T) attribute.Value) {
	a := e.open(fAnyArray)
	for _, x := range xs {
		m := e.open(fArrayValues)
		e.value(of(x))
		e.close(m)
	}
	e.close(a)
}

// open starts the embedded message field and returns where its body
// begins, for close.
func (e *encoder) open(field protowire.Number) int {
	e.buf = protowire.AppendTag(e.buf, field, protowire.BytesType)
	return len(e.buf)
}

// close ends the message open began: it moves the body up to make room for
// its length, which protobuf wants before the body and in as few bytes as
// it takes. A body is a span or less except for the two outermost ones,
// which are moved once a batch.
func (e *encoder) close(at int) {
	n := len(e.buf) - at
	k := protowire.SizeVarint(uint64(n))
	e.buf = append(e.buf, make([]byte, k)...)
	copy(e.buf[at+k:], e.buf[at:at+n])
	protowire.AppendVarint(e.buf[:at], uint64(n))
}

func (e *encoder) str(field protowire.Number, s string) {
	if s == "" {
		return // proto3: the default is not written
	}
	e.buf = protowire.AppendTag(e.buf, field, protowire.BytesType)
	e.buf = protowire.AppendString(e.buf, s)
}

func (e *encoder) bytes(field protowire.Number, b []byte) {
	e.buf = protowire.AppendTag(e.buf, field, protowire.BytesType)
	e.buf = protowire.AppendBytes(e.buf, b)
}

func (e *encoder) varint(field protowire.Number, v uint64) {
	if v == 0 {
		return
	}
	e.buf = protowire.AppendTag(e.buf, field, protowire.VarintType)
	e.buf = protowire.AppendVarint(e.buf, v)
}

func (e *encoder) fixed64(field protowire.Number, v uint64) {
	e.buf = protowire.AppendTag(e.buf, field, protowire.Fixed64Type)
	e.buf = protowire.AppendFixed64(e.buf, v)
}

func (e *encoder) fixed32(field protowire.Number, v uint32) {
	e.buf = protowire.AppendTag(e.buf, field, protowire.Fixed32Type)
	e.buf = protowire.AppendFixed32(e.buf, v)
}
