// Package sockio reads and writes a connected socket with system calls the
// Go scheduler is not told of, for the gateway's request path (h1's
// connections from callers, the gateway's to replicas).
//
// A read or write through a net.Conn enters its system call through the
// runtime (entersyscall, exitsyscall): the goroutine's P is marked as in a
// system call so that the runtime's monitor thread (sysmon) can hand it to
// another thread should the call block, and a call made while the monitor
// sleeps because every P was idle wakes it. A socket's reads and writes do
// not block (the network poller waits for them), so for a gateway that
// goes idle between bursts of requests this woke the monitor for nothing
// every time and started the 20 µs polling it does after a wake, and a long
// loopback write had its P handed to a second thread: in `bench gateway`
// the monitor thread alone spent 3.7 % of the gateway's CPU and ran 274,303
// times (docs/gateway.md, "The monitor thread"). Here
// the calls are made raw inside syscall.RawConn's Read and Write, which
// wait on the poller for readiness and keep the connection's deadlines as
// net.Conn's Read and Write do.
//
// Where a connection has no descriptor (TLS, net.Pipe) or the system is
// not Linux, New returns the connection itself.
package sockio
