package process

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"modelplane/agent"
	"modelplane/busapi"
)

// tailWindow is how far back from its end a log is read to find its last
// lines.
const tailWindow = 256 << 10

// ReadLog reads replica id's log for the control plane (agent.LogReader):
// its last tail lines when offset is negative, else at most max bytes
// from offset on. A log that shrank below offset (capped, or a new run
// truncated it) is read again from its start. A replica has one log, each
// run of its runtime appended after the agent's "--- modelplane agent:
// starting" line, so a crashed run is in it: there is no previous run's
// log or other container's to read (agent.ErrLogUnsupported).
func (d *Driver) ReadLog(req busapi.LogRequest, max int) (busapi.LogChunk, error) {
	id, offset, tail := req.Replica, req.Offset, req.Tail
	if req.Previous || (req.Container != "" && req.Container != busapi.LogContainerRuntime) {
		return busapi.LogChunk{}, fmt.Errorf("%w: replica %s runs on a node, where every run of its runtime is appended to its one log; read it without previous or container",
			agent.ErrLogUnsupported, id)
	}
	if id == "" || filepath.Base(id) != id || strings.HasPrefix(id, ".") {
		return busapi.LogChunk{}, fmt.Errorf("replica %q: not a replica id", id)
	}
	f, err := os.Open(d.logPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return busapi.LogChunk{}, fmt.Errorf("replica %s has no log on this node", id)
	}
	if err != nil {
		return busapi.LogChunk{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return busapi.LogChunk{}, err
	}
	size := st.Size()
	max = min(max, busapi.MaxLogChunk)
	if offset < 0 {
		from := max64(size-tailWindow, 0)
		buf := make([]byte, size-from)
		if _, err := f.ReadAt(buf, from); err != nil && !errors.Is(err, io.EOF) {
			return busapi.LogChunk{}, err
		}
		start := tailStart(buf, tail)
		if len(buf)-start > max {
			start = len(buf) - max
		}
		return busapi.LogChunk{Data: string(buf[start:]), Offset: from + int64(start), Next: size, Size: size}, nil
	}
	if offset > size {
		offset = 0
	}
	buf := make([]byte, min(int64(max), size-offset))
	n, err := f.ReadAt(buf, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return busapi.LogChunk{}, err
	}
	return busapi.LogChunk{Data: string(buf[:n]), Offset: offset, Next: offset + int64(n), Size: size}, nil
}

// tailStart is where the last tail lines of buf begin (a final newline
// ends the last line, it does not start an empty one).
func tailStart(buf []byte, tail int) int {
	end := len(buf)
	if end > 0 && buf[end-1] == '\n' {
		end--
	}
	for range tail {
		i := bytes.LastIndexByte(buf[:end], '\n')
		if i < 0 {
			return 0
		}
		end = i
	}
	if tail <= 0 {
		return len(buf)
	}
	return end + 1
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}
