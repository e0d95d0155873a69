package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"modelplane/busapi"
)

// errSpoolFull is append's answer when the batch would pass the bound.
var errSpoolFull = errors.New("usage spool is full")

// spool is the agent's write-ahead queue of usage batches: every batch is
// written here before it is published and removed only after JetStream
// acknowledged it, so a batch survives an outage, an ack timeout and a
// kill -9 at any moment, and is replayed in order with its original id.
//
// One file per batch, named by a sequence number that orders the replay,
// holding the exact message payload. A file appears whole or not at all
// (written to a temporary name, then renamed). The page cache survives a
// killed process, so a batch published at once skips fsync; a batch that
// must wait (NATS down, ack missing) is fsynced with its directory so that
// it also survives losing the machine.
//
// Only the meter goroutine calls it; size and count are atomics because
// Counters reads them from anywhere.
type spool struct {
	dir     string
	max     int64
	entries []spoolEntry
	next    uint64
	size    atomic.Int64
	count   atomic.Int64
}

type spoolEntry struct {
	seq    uint64
	id     string // the batch id; read from the file when empty
	size   int64
	synced bool
}

const spoolExt = ".batch"

// openSpool lists what a previous process left, oldest first, and clears
// its half-written temporary files.
func openSpool(dir string, maxBytes int64) (*spool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("usage spool: %w", err)
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("usage spool: %w", err)
	}
	s := &spool{dir: dir, max: maxBytes, next: 1}
	for _, de := range des {
		name := de.Name()
		if strings.HasPrefix(name, ".tmp-") {
			_ = os.Remove(filepath.Join(dir, name))
			continue
		}
		base, ok := strings.CutSuffix(name, spoolExt)
		if !ok {
			continue
		}
		seq, err := strconv.ParseUint(base, 10, 64)
		if err != nil {
			continue
		}
		info, err := de.Info()
		if err != nil {
			return nil, fmt.Errorf("usage spool: %w", err)
		}
		// Files found at start are as durable as they will get: whatever
		// the previous process did not sync was not lost with it.
		s.entries = append(s.entries, spoolEntry{seq: seq, size: info.Size(), synced: true})
		s.size.Add(info.Size())
		s.next = max(s.next, seq+1)
	}
	slices.SortFunc(s.entries, func(a, b spoolEntry) int { return cmpUint(a.seq, b.seq) })
	s.count.Store(int64(len(s.entries)))
	return s, nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (s *spool) path(seq uint64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%020d%s", seq, spoolExt))
}

// append writes one batch at the tail; durable fsyncs it at once.
func (s *spool) append(id string, data []byte, durable bool) error {
	if s.size.Load()+int64(len(data)) > s.max {
		return errSpoolFull
	}
	seq := s.next
	tmp := filepath.Join(s.dir, fmt.Sprintf(".tmp-%020d", seq))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("usage spool: %w", err)
	}
	_, err = f.Write(data)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.path(seq))
	}
	if err == nil && durable {
		err = syncDir(s.dir)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("usage spool: %w", err)
	}
	s.next++
	s.entries = append(s.entries, spoolEntry{seq: seq, id: id, size: int64(len(data)), synced: durable})
	s.size.Add(int64(len(data)))
	s.count.Add(1)
	return nil
}

// head returns up to n entries from the front.
func (s *spool) head(n int) []spoolEntry {
	return slices.Clone(s.entries[:min(n, len(s.entries))])
}

func (s *spool) len() int { return len(s.entries) }

// read returns a batch's payload and id.
func (s *spool) read(e spoolEntry) ([]byte, string, error) {
	data, err := os.ReadFile(s.path(e.seq))
	if err != nil {
		return nil, "", fmt.Errorf("usage spool: %w", err)
	}
	id := e.id
	if id == "" {
		if id = batchID(data); id == "" {
			return nil, "", fmt.Errorf("usage spool: %s is not a usage batch", s.path(e.seq))
		}
	}
	return data, id, nil
}

// batchID is the id of a spooled batch: binary, or JSON as agents before
// the binary form spooled it; empty when data is neither.
func batchID(data []byte) string {
	if busapi.IsBinaryUsage(data) {
		b, _ := busapi.DecodeUsage(data)
		return b.ID
	}
	var head struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(data, &head)
	return head.ID
}

// remove drops an acknowledged (or unreadable) batch. Its removal need not
// be durable: a batch replayed after a crash is deduplicated downstream.
func (s *spool) remove(seq uint64) error {
	i := slices.IndexFunc(s.entries, func(e spoolEntry) bool { return e.seq == seq })
	if i < 0 {
		return nil
	}
	e := s.entries[i]
	if err := os.Remove(s.path(seq)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("usage spool: %w", err)
	}
	s.entries = slices.Delete(s.entries, i, i+1)
	s.size.Add(-e.size)
	s.count.Add(-1)
	return nil
}

// quarantine moves an unreadable batch aside for a person to look at.
func (s *spool) quarantine(seq uint64) {
	_ = os.Rename(s.path(seq), s.path(seq)+".bad")
	i := slices.IndexFunc(s.entries, func(e spoolEntry) bool { return e.seq == seq })
	if i >= 0 {
		s.size.Add(-s.entries[i].size)
		s.count.Add(-1)
		s.entries = slices.Delete(s.entries, i, i+1)
	}
}

// syncAll makes every waiting batch durable.
func (s *spool) syncAll() error {
	var dirty bool
	for i := range s.entries {
		e := &s.entries[i]
		if e.synced {
			continue
		}
		f, err := os.Open(s.path(e.seq))
		if err != nil {
			return fmt.Errorf("usage spool: %w", err)
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("usage spool: %w", err)
		}
		e.synced, dirty = true, true
	}
	if dirty {
		if err := syncDir(s.dir); err != nil {
			return fmt.Errorf("usage spool: %w", err)
		}
	}
	return nil
}

// syncDir makes renames and new names in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
