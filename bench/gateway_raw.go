package bench

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"time"
)

// rawProxy is the bench's floor of a Go proxy without net/http: what the
// Go runtime itself (goroutines, the network poller, the system calls)
// costs a proxied request, so that the figures can tell net/http's share
// of the gateway's CPU from the language's. It speaks only what the
// bench sends: HTTP/1.1 requests and answers with a Content-Length, each
// client connection relayed over a keep-alive connection of its own to
// the replica, one goroutine a connection and no other. It is not a
// proxy for anything else.
type rawProxy struct {
	upstream string
	ln       net.Listener
}

// startRawProxy serves a raw proxy in front of upstream on a free port
// until s closes, and returns its address.
func startRawProxy(s *scratch, upstream string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	p := &rawProxy{upstream: upstream, ln: ln}
	go p.serve()
	s.onClose(func() { ln.Close() })
	return ln.Addr().String(), nil
}

// serve accepts on ln until it is closed.
func (p *rawProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.relay(c)
	}
}

// relay passes messages between client c and its own replica connection
// until either side closes or sends what it cannot read.
func (p *rawProxy) relay(c net.Conn) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	cr, cw := bufio.NewReaderSize(c, 16<<10), bufio.NewWriterSize(c, 16<<10)
	ur, uw := bufio.NewReaderSize(up, 16<<10), bufio.NewWriterSize(up, 16<<10)
	for {
		if copyMessage(uw, cr) != nil || uw.Flush() != nil {
			return
		}
		if copyMessage(cw, ur) != nil || cw.Flush() != nil {
			return
		}
	}
}

var errRawFraming = errors.New("raw proxy: only Content-Length bodies")

// copyMessage copies one HTTP/1.1 message (head and Content-Length body)
// from r to w.
func copyMessage(w *bufio.Writer, r *bufio.Reader) error {
	length := int64(0)
	for first := true; ; first = false {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if _, err := w.Write(line); err != nil {
			return err
		}
		if len(line) <= 2 && !first {
			break
		}
		if name, value, ok := bytes.Cut(line, []byte(":")); ok {
			switch {
			case bytes.EqualFold(name, []byte("Content-Length")):
				if length, err = strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64); err != nil || length < 0 {
					return errRawFraming
				}
			case bytes.EqualFold(name, []byte("Transfer-Encoding")):
				return errRawFraming
			}
		}
	}
	_, err := io.CopyN(w, r, length)
	return err
}
