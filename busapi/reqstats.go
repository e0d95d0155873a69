package busapi

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A gateway's ReqStatsBatch goes over the bus in a binary form of its own
// rather than as JSON, as samples and usage do (docs/decisions.md, "Request
// statistics travel in binary"): a window carries four histograms of
// LatencyBuckets counts, nearly all of them zero, which JSON wrote out one
// by one and the ingest read back. The ingest still reads a JSON batch or
// lone window, what gateways of earlier versions publish.
//
// The form, in the parts of binary.go:
//
//	"MPR1" id gateway count window…
//	window: ID WindowStart WindowEnd Gateway Endpoint Team Version Count
//	        Errors.Client Errors.Upstream Errors.Timeout Errors.Shed
//	        Errors.Canceled Latency LatencySumMS Streams TTFT TTFTSumMS
//	        TPOT TPOTSumMS Tokens flags EndpointID CallerTeam ViaGraph
//	        ViaGraphVersion Overhead OverheadSumMS len(Notable) notable…
//	histogram: len(buckets) n (gap count)…
//	notable: Kind RequestID TraceID Replica Status EndMS LatencyMS UpstreamMS
//
// A histogram names only its n buckets that are not zero, each by its gap
// from the one before (the first's from the start). flags is one byte: 1
// when Pinned.
const statsMagic = "MPR1"

// IsBinaryReqStats reports whether data is a binary ReqStatsBatch
// (StatsBody.Message), not JSON.
func IsBinaryReqStats(data []byte) bool { return hasMagic(data, statsMagic) }

// StatsBody gathers encoded windows for one binary ReqStatsBatch message,
// up to BatchMaxBytes: a gateway builds its messages with it, and
// `modelplane bench ingest` the messages it publishes as gateways would.
type StatsBody struct{ body }

// Add encodes s into b and reports true, unless b holds windows already and
// the message would grow past BatchMaxBytes with s, in which case b is left
// as it was; the first window is always added.
func (b *StatsBody) Add(s *ReqStats) bool {
	mark := len(b.items)
	b.items = appendStats(b.items, s)
	return b.keep(mark)
}

// Message returns the batch of the windows gathered, with id and gateway,
// and empties b.
func (b *StatsBody) Message(id, gateway string) []byte { return b.message(statsMagic, id, gateway) }

func appendStats(b []byte, s *ReqStats) []byte {
	b = appendString(b, s.ID)
	b = binary.AppendVarint(binary.AppendVarint(b, s.WindowStart), s.WindowEnd)
	for _, str := range [...]string{s.Gateway, s.Endpoint, s.Team, s.Version} {
		b = appendString(b, str)
	}
	e := &s.Errors
	for _, n := range [...]uint64{s.Count, e.Client, e.Upstream, e.Timeout, e.Shed, e.Canceled} {
		b = binary.AppendUvarint(b, n)
	}
	b = appendFloat(appendHistogram(b, s.Latency), s.LatencySumMS)
	b = binary.AppendUvarint(b, s.Streams)
	b = appendFloat(appendHistogram(b, s.TTFT), s.TTFTSumMS)
	b = appendFloat(appendHistogram(b, s.TPOT), s.TPOTSumMS)
	b = binary.AppendUvarint(b, s.Tokens)
	var flags byte
	if s.Pinned {
		flags |= 1
	}
	b = binary.AppendVarint(append(b, flags), s.EndpointID)
	b = appendString(appendString(appendString(b, s.CallerTeam), s.ViaGraph), s.ViaGraphVersion)
	b = appendFloat(appendHistogram(b, s.Overhead), s.OverheadSumMS)
	b = binary.AppendUvarint(b, uint64(len(s.Notable)))
	for i := range s.Notable {
		n := &s.Notable[i]
		b = appendString(appendString(appendString(appendString(b, n.Kind), n.RequestID), n.TraceID), n.Replica)
		b = binary.AppendVarint(binary.AppendVarint(b, int64(n.Status)), n.EndMS)
		b = appendFloat(appendFloat(b, n.LatencyMS), n.UpstreamMS)
	}
	return b
}

// appendHistogram writes h's length and its buckets that are not zero.
func appendHistogram(b []byte, h []uint64) []byte {
	b = binary.AppendUvarint(b, uint64(len(h)))
	n := 0
	for _, c := range h {
		if c != 0 {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	last := -1
	for i, c := range h {
		if c != 0 {
			b = binary.AppendUvarint(binary.AppendUvarint(b, uint64(i-last-1)), c)
			last = i
		}
	}
	return b
}

// The fewest bytes each part takes, which bound a count before anything is
// made for it.
const (
	minWindowBytes  = 8*1 + 2 + 6 + 4*2 + 4*8 + 2 + 1 + 1 + 1 // strings, times, counts, histograms, sums, streams, tokens, flags, endpoint id, notables
	minNotableBytes = 4 + 2 + 16                              // strings, status and end, two floats
	// bucketsPerByte bounds the buckets a message's histograms may hold
	// against its size: a message of a few bytes must not make megabytes
	// of counts. A gateway's densest window (four histograms, each with
	// one bucket that is not zero) holds about 8 buckets a byte.
	bucketsPerByte = 16
)

// DecodeReqStats parses a binary ReqStatsBatch (IsBinaryReqStats). The
// message is copied once: every string of the batch is a part of that copy,
// and the histograms' counts and the notable requests are cut from one
// array each, grown a chunk at a time. A batch that does not parse is an
// error, never a panic (FuzzDecodeReqStats).
func DecodeReqStats(data []byte) (ReqStatsBatch, error) {
	if !IsBinaryReqStats(data) {
		return ReqStatsBatch{}, errors.New("not a binary batch of request statistics")
	}
	body := data[len(statsMagic):]
	d := statsDecoder{decoder: newDecoder(body), buckets: bucketsPerByte * len(body)}
	b := ReqStatsBatch{ID: d.str(), Gateway: d.str()}
	n := d.count(minWindowBytes)
	if d.err != nil {
		return ReqStatsBatch{}, d.err
	}
	b.Stats = make([]ReqStats, n)
	for i := range b.Stats {
		d.window(&b.Stats[i])
		if d.err != nil {
			return ReqStatsBatch{}, fmt.Errorf("window %d: %w", i, d.err)
		}
	}
	if err := d.end("window"); err != nil {
		return ReqStatsBatch{}, err
	}
	return b, nil
}

// statsDecoder is a decoder with the arrays a batch's histograms and
// notable requests are cut from, and the buckets its histograms may still
// hold.
type statsDecoder struct {
	decoder
	counts  []uint64
	notes   []NotableRequest
	buckets int
}

func (d *statsDecoder) window(s *ReqStats) {
	s.ID = d.str()
	s.WindowStart, s.WindowEnd = d.varint(), d.varint()
	s.Gateway, s.Endpoint, s.Team, s.Version = d.str(), d.str(), d.str(), d.str()
	e := &s.Errors
	s.Count, e.Client, e.Upstream, e.Timeout, e.Shed, e.Canceled = d.uvarint(), d.uvarint(), d.uvarint(), d.uvarint(), d.uvarint(), d.uvarint()
	s.Latency, s.LatencySumMS = d.histogram(), d.float()
	s.Streams = d.uvarint()
	s.TTFT, s.TTFTSumMS = d.histogram(), d.float()
	s.TPOT, s.TPOTSumMS = d.histogram(), d.float()
	s.Tokens = d.uvarint()
	if d.err == nil && d.i < len(d.b) {
		s.Pinned = d.b[d.i]&1 != 0
		d.i++
	} else {
		d.fail("flags")
	}
	s.EndpointID = d.varint()
	s.CallerTeam, s.ViaGraph, s.ViaGraphVersion = d.str(), d.str(), d.str()
	s.Overhead, s.OverheadSumMS = d.histogram(), d.float()
	if n := d.count(minNotableBytes); n > 0 {
		s.Notable = cut(&d.notes, n, min(arenaChunk, d.left()/minNotableBytes))
		for i := range s.Notable {
			r := &s.Notable[i]
			r.Kind, r.RequestID, r.TraceID, r.Replica = d.str(), d.str(), d.str(), d.str()
			r.Status, r.EndMS = int(d.varint()), d.varint()
			r.LatencyMS, r.UpstreamMS = d.float(), d.float()
		}
	}
}

// histogram reads one histogram; nil when it has no buckets.
func (d *statsDecoder) histogram() []uint64 {
	size := d.uvarint()
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if size > uint64(d.buckets) || n > size || n > uint64(d.left()/2) {
		d.fail(fmt.Sprintf("a histogram of %d buckets, %d of them set", size, n))
		return nil
	}
	if size == 0 {
		return nil
	}
	d.buckets -= int(size)
	h := cut(&d.counts, int(size), 32*LatencyBuckets)
	at := uint64(0) // the first bucket the next may be
	for range n {
		gap, c := d.uvarint(), d.uvarint()
		if d.err == nil && gap >= size-at {
			d.fail(fmt.Sprintf("bucket %d past a histogram of %d", at+gap, size))
		}
		if d.err != nil {
			return nil
		}
		at += gap
		h[at] = c
		at++
	}
	return h
}
