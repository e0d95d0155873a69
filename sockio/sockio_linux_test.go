package sockio_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"modelplane/sockio"
)

// pair returns the two ends of a TCP connection on loopback.
func pair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

func TestNewTakesTheSocket(t *testing.T) {
	c, _ := pair(t)
	if _, ok := sockio.New(c).(*sockio.Conn); !ok {
		t.Fatalf("New(TCP) = %T, want *sockio.Conn", sockio.New(c))
	}
	p, q := net.Pipe()
	defer p.Close()
	defer q.Close()
	if rw := sockio.New(p); rw != p {
		t.Fatalf("New(pipe) = %T, want the pipe itself", rw)
	}
}

// A write larger than the socket's buffers waits for the reader and
// arrives whole and in order.
func TestLargeWriteArrivesWhole(t *testing.T) {
	c, s := pair(t)
	want := make([]byte, 32<<20)
	for i := range want {
		want[i] = byte(i*7 + i>>13)
	}
	w, r := sockio.New(c), sockio.New(s)
	done := make(chan error, 1)
	go func() {
		n, err := w.Write(want)
		if err == nil && n != len(want) {
			err = errors.New("short write")
		}
		c.CloseWrite()
		done <- err
	}()
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not the %d written", len(got), len(want))
	}
}

// The errors are net.Conn's own, word for word: a closed peer is io.EOF, a
// past deadline a timeout, a closed connection net.ErrClosed.
func TestErrorsAreNetConns(t *testing.T) {
	c, s := pair(t)
	buf := make([]byte, 16)

	c.SetReadDeadline(time.Now().Add(-time.Second))
	_, want := c.Read(buf)
	_, err := sockio.New(c).Read(buf)
	if !errors.Is(err, os.ErrDeadlineExceeded) || err.Error() != want.Error() {
		t.Fatalf("read past the deadline: %v, want %v", err, want)
	}
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("read past the deadline: %v is not a timeout", err)
	}
	c.SetReadDeadline(time.Time{})

	c.SetWriteDeadline(time.Now().Add(-time.Second))
	_, want = c.Write(buf)
	_, err = sockio.New(c).Write(buf)
	if !errors.Is(err, os.ErrDeadlineExceeded) || err.Error() != want.Error() {
		t.Fatalf("write past the deadline: %v, want %v", err, want)
	}
	c.SetWriteDeadline(time.Time{})

	s.Close()
	if n, err := sockio.New(c).Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("read from a closed peer = %d, %v; want 0, EOF", n, err)
	}

	rw := sockio.New(c)
	c.Close()
	_, want = c.Read(buf)
	_, err = rw.Read(buf)
	if !errors.Is(err, net.ErrClosed) || err.Error() != want.Error() {
		t.Fatalf("read after close: %v, want %v", err, want)
	}
	_, want = c.Write(buf)
	_, err = rw.Write(buf)
	if !errors.Is(err, net.ErrClosed) || err.Error() != want.Error() {
		t.Fatalf("write after close: %v, want %v", err, want)
	}
}

// A read waiting for data ends at its deadline; a write waiting for room
// ends at its deadline, reporting what it wrote: what the peer then reads.
func TestWaitsEndAtTheDeadline(t *testing.T) {
	c, s := pair(t)
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := sockio.New(c).Read(make([]byte, 16)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read with nothing sent: %v, want the deadline's error", err)
	}
	big := make([]byte, 256<<20) // more than loopback's buffers hold
	c.SetWriteDeadline(time.Now().Add(20 * time.Millisecond))
	n, err := sockio.New(c).Write(big)
	if !errors.Is(err, os.ErrDeadlineExceeded) || n >= len(big) {
		t.Fatalf("write to a peer that reads nothing = %d, %v; want part of it and the deadline's error", n, err)
	}
	c.CloseWrite()
	got, err := io.Copy(io.Discard, s)
	if err != nil || got != int64(n) {
		t.Fatalf("the peer read %d bytes (%v), the write reported %d", got, err, n)
	}
}

// A write to a peer that reset the connection fails with the system's
// error, as net.Conn's does.
func TestWriteAfterReset(t *testing.T) {
	c, s := pair(t)
	s.SetLinger(0)
	s.Close() // a reset
	// The reset has come once a read says so; the read waits for it.
	if _, err := sockio.New(c).Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after a reset: %v, want ECONNRESET", err)
	}
	_, err := sockio.New(c).Write([]byte("x"))
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "write" || !(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		t.Fatalf("write after a reset: %v, want a write error of ECONNRESET or EPIPE", err)
	}
}

func TestWriteFD(t *testing.T) {
	c, s := pair(t)
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var e syscall.Errno
	if err := rc.Write(func(fd uintptr) bool { n, e = sockio.Write(fd, []byte("hello")); return true }); err != nil {
		t.Fatal(err)
	}
	if n != 5 || e != 0 {
		t.Fatalf("Write = %d, %v; want 5, 0", n, e)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(s, got); err != nil || string(got) != "hello" {
		t.Fatalf("peer read %q, %v", got, err)
	}
	if n, e := sockio.Write(^uintptr(0), []byte("x")); n != 0 || e != syscall.EBADF {
		t.Fatalf("Write to a bad descriptor = %d, %v; want 0, EBADF", n, e)
	}
}
