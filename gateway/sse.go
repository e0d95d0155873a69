package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sync"
)

// maxEventBytes bounds one server-sent event from a replica.
const maxEventBytes = 1 << 20

var errEventTooLarge = errors.New("server-sent event too large")

// eventReader splits a text/event-stream into events, each returned with
// its terminating blank line, byte for byte as the replica sent it, so the
// gateway relays events whole and flushes after each.
type eventReader struct {
	br  *bufio.Reader
	buf bytes.Buffer
}

// eventReaders are reused across streams: a stream is short and its 16 KiB
// read buffer was most of what starting one allocated.
var eventReaders = sync.Pool{New: func() any { return &eventReader{br: bufio.NewReaderSize(nil, 16<<10)} }}

func newEventReader(r io.Reader) *eventReader {
	e := eventReaders.Get().(*eventReader)
	e.br.Reset(r)
	return e
}

// release returns e for reuse; e must not be used after.
func (e *eventReader) release() {
	e.br.Reset(nil)
	if e.buf.Cap() > 64<<10 {
		e.buf = bytes.Buffer{} // do not keep one huge event's buffer
	}
	e.buf.Reset()
	eventReaders.Put(e)
}

// next returns the next event (a copy the caller may keep). At the end of
// the stream it returns what is left, if anything, then io.EOF.
func (e *eventReader) next() ([]byte, error) {
	e.buf.Reset()
	for {
		line, err := e.br.ReadSlice('\n')
		if e.buf.Len()+len(line) > maxEventBytes {
			return nil, errEventTooLarge
		}
		e.buf.Write(line)
		switch {
		case err == nil:
			if isBlank(line) && e.buf.Len() > len(line) {
				return bytes.Clone(e.buf.Bytes()), nil
			}
			if isBlank(line) {
				e.buf.Reset() // stray blank line between events
			}
		case errors.Is(err, bufio.ErrBufferFull):
			// a long line: keep reading it
		case e.buf.Len() > 0:
			return bytes.Clone(e.buf.Bytes()), nil // the next call returns err
		default:
			return nil, err
		}
	}
}

func isBlank(line []byte) bool {
	return len(line) == 1 || len(line) == 2 && line[0] == '\r'
}
