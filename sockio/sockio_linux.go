package sockio

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// Conn reads and writes a connection's socket with raw system calls. It
// is for one reader and one writer at a time, as a bufio.Reader and a
// bufio.Writer use it; the connection stays nc's to close and to set
// deadlines on.
type Conn struct {
	nc net.Conn
	rc syscall.RawConn

	// The read or write in progress: its buffer, what it moved and the
	// error it met; readFn and writeFn are readStep and writeStep as
	// functions, made once.
	rp, wp          []byte
	rn, wn          int
	rerr, werr      syscall.Errno
	readFn, writeFn func(uintptr) bool
}

// New returns what reads and writes nc: a Conn on nc's socket, or nc
// itself when it has none (a TLS or an in-memory connection).
func New(nc net.Conn) io.ReadWriter {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nc
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nc
	}
	c := &Conn{nc: nc, rc: rc}
	c.readFn, c.writeFn = c.readStep, c.writeStep
	return c
}

// Read reads into p as nc.Read does: io.EOF once the peer closed, the
// connection's read deadline kept.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rp, c.rn, c.rerr = p, 0, 0
	err := c.rc.Read(c.readFn)
	c.rp = nil
	switch {
	case err != nil:
		return 0, c.opError(err, "read")
	case c.rerr != 0:
		return 0, c.opError(os.NewSyscallError("read", c.rerr), "read")
	case c.rn == 0:
		return 0, io.EOF
	}
	return c.rn, nil
}

// readStep is Read's function for RawConn.Read: true once the read is
// done, false to wait for readiness.
func (c *Conn) readStep(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.rp[0])), uintptr(len(c.rp)))
		switch e {
		case 0:
			c.rn = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		default:
			c.rerr = e
			return true
		}
	}
}

// Write writes all of p as nc.Write does, the connection's write
// deadline kept.
func (c *Conn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.wp, c.wn, c.werr = p, 0, 0
	err := c.rc.Write(c.writeFn)
	n := c.wn
	c.wp = nil
	switch {
	case c.werr != 0:
		return n, c.opError(os.NewSyscallError("write", c.werr), "write")
	case err != nil:
		return n, c.opError(err, "write")
	}
	return n, nil
}

// writeStep is Write's function for RawConn.Write: true once all is
// written or a write failed, false to wait for room.
func (c *Conn) writeStep(fd uintptr) bool {
	for len(c.wp) > 0 {
		n, e := Write(fd, c.wp)
		c.wn += n
		c.wp = c.wp[n:]
		switch e {
		case 0:
		case syscall.EAGAIN:
			return false
		default:
			c.werr = e
			return true
		}
	}
	return true
}

// Write makes one write system call of p to fd, raw, again while it is
// interrupted, and returns what it wrote and the error number (0 for none,
// EAGAIN when fd takes nothing now).
func Write(fd uintptr, p []byte) (int, syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		switch e {
		case 0:
			return int(n), 0
		case syscall.EINTR:
		default:
			return 0, e
		}
	}
}

// opError is err as net.Conn's Read and Write report it: the raw
// connection's own errors (a deadline passed, the connection closed) come
// as "raw-read" and "raw-write" operations.
func (c *Conn) opError(err error, op string) error {
	if oe, ok := err.(*net.OpError); ok {
		oe.Op = op
		return oe
	}
	return &net.OpError{Op: op, Net: c.nc.LocalAddr().Network(), Source: c.nc.LocalAddr(), Addr: c.nc.RemoteAddr(), Err: err}
}
