// Package freeport finds unused TCP ports on the loopback interface for child
// processes that need to be told a port before they listen.
package freeport

import "net"

// Get returns a port that was free a moment ago on 127.0.0.1.
func Get() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
