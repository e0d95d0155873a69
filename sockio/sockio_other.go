//go:build !linux

package sockio

import (
	"io"
	"net"
	"syscall"
)

// New returns nc: elsewhere than on Linux its own Read and Write serve.
func New(nc net.Conn) io.ReadWriter { return nc }

// Write makes one write system call of p to fd, again while it is
// interrupted, and returns what it wrote and the error number (0 for none,
// EAGAIN when fd takes nothing now).
func Write(fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		n, err := syscall.Write(int(fd), p)
		switch e, _ := err.(syscall.Errno); {
		case err == nil:
			return n, 0
		case e != syscall.EINTR:
			return 0, e
		}
	}
}
