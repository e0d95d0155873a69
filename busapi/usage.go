package busapi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// An agent's UsageBatch goes over the bus in a binary form of its own rather
// than as JSON: reading the JSON was a fifth of the usage ingest's CPU, more
// than anything it did with a row but the insert (docs/decisions.md, "Usage
// batches travel in binary"). The ingest still reads a JSON batch, what
// agents of earlier versions publish and may have left in their spools.
//
// A batch's records repeat a few strings (its node, each replica's team,
// endpoint, model and version), so the strings are written once, in a
// table, and a record names each by its index there:
//
//	"MPU1" id node len(table) string… count record…
//	record: Time GPU Slice Node GPUType Profile Team Endpoint Model Version
//	        Replica UtilPct MemoryMB Requests
//
// in the parts of binary.go, a record's strings each a uvarint index into
// the table.
const usageMagic = "MPU1"

// IsBinaryUsage reports whether data is a binary UsageBatch
// (AppendUsageBatch), not JSON.
func IsBinaryUsage(data []byte) bool { return hasMagic(data, usageMagic) }

// AppendUsageBatch appends b in its binary form to dst and returns it.
func AppendUsageBatch(dst []byte, b *UsageBatch) []byte {
	// The table first, and each record's strings' places in it.
	index := make(map[string]uint32, 16)
	var table []string
	tableBytes := 0
	names := make([]uint32, 0, 8*len(b.Records))
	for i := range b.Records {
		r := &b.Records[i]
		for _, s := range [...]string{r.Node, r.GPUType, r.Profile, r.Team, r.Endpoint, r.Model, r.Version, r.Replica} {
			n, ok := index[s]
			if !ok {
				n = uint32(len(table))
				index[s], table, tableBytes = n, append(table, s), tableBytes+len(s)+binary.MaxVarintLen32
			}
			names = append(names, n)
		}
	}
	dst = slices.Grow(dst, len(usageMagic)+len(b.ID)+len(b.Node)+tableBytes+len(b.Records)*(usageRecordBytes+16)+4*binary.MaxVarintLen64)
	dst = append(dst, usageMagic...)
	dst = appendString(appendString(dst, b.ID), b.Node)
	dst = binary.AppendUvarint(dst, uint64(len(table)))
	for _, s := range table {
		dst = appendString(dst, s)
	}
	dst = binary.AppendUvarint(dst, uint64(len(b.Records)))
	for i := range b.Records {
		r := &b.Records[i]
		dst = binary.AppendVarint(dst, r.Time)
		dst = binary.AppendVarint(dst, int64(r.GPU))
		dst = binary.AppendVarint(dst, int64(r.Slice))
		for _, n := range names[8*i : 8*i+8] {
			dst = binary.AppendUvarint(dst, uint64(n))
		}
		dst = appendFloat(dst, r.UtilPct)
		dst = binary.AppendVarint(dst, r.MemoryMB)
		dst = binary.AppendVarint(dst, r.Requests)
	}
	return dst
}

// usageRecordBytes is the fewest bytes a record takes: eleven varints and a
// float. An agent's record takes about 16 more (its time, memory and
// requests take more than a byte).
const usageRecordBytes = 11 + 8

// DecodeUsage parses a binary UsageBatch (IsBinaryUsage). The message is
// copied once and every string of the batch is a part of that copy, each
// table entry shared by the records that name it. A batch that does not
// parse, or whose record names a string past the table, is an error, never
// a panic (FuzzDecodeUsage).
func DecodeUsage(data []byte) (UsageBatch, error) {
	if !IsBinaryUsage(data) {
		return UsageBatch{}, errors.New("not a binary usage batch")
	}
	d := newDecoder(data[len(usageMagic):])
	b := UsageBatch{ID: d.str(), Node: d.str()}
	table := make([]string, d.count(1))
	for i := range table {
		table[i] = d.str()
	}
	n := d.count(usageRecordBytes)
	if d.err != nil {
		return UsageBatch{}, d.err
	}
	if n > 0 {
		b.Records = make([]Usage, n)
	}
	for i := range b.Records {
		r := &b.Records[i]
		r.Time, r.GPU, r.Slice = d.varint(), int(d.varint()), int(d.varint())
		r.Node, r.GPUType, r.Profile, r.Team = d.name(table), d.name(table), d.name(table), d.name(table)
		r.Endpoint, r.Model, r.Version, r.Replica = d.name(table), d.name(table), d.name(table), d.name(table)
		r.UtilPct, r.MemoryMB, r.Requests = d.float(), d.varint(), d.varint()
		if d.err != nil {
			return UsageBatch{}, fmt.Errorf("record %d: %w", i, d.err)
		}
	}
	if err := d.end("record"); err != nil {
		return UsageBatch{}, err
	}
	return b, nil
}

// name reads a string's index in table and returns the string.
func (d *decoder) name(table []string) string {
	i := d.uvarint()
	if i < uint64(len(table)) && d.err == nil {
		return table[i]
	}
	d.fail(fmt.Sprintf("string %d of a table of %d", i, len(table)))
	return ""
}
