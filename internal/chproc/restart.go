package chproc

import (
	"context"
	"errors"
	"os/exec"
	"syscall"
)

// Kill ends the server at once with SIGKILL, as a crash or the OOM killer
// would, and waits for it to exit. Restart brings it back.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil || !s.running() {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.exited
}

// Restart starts a stopped or killed server again with the same directory
// and the same TCP and HTTP ports, so that clients holding its address (a
// clickhouse-go pool) reconnect to it as they would to a production server
// coming back. Outage tests use it.
func (s *Server) Restart(ctx context.Context) error {
	if s.cmd != nil && s.running() {
		return errors.New("clickhouse: restart of a server that is still running")
	}
	bin, err := exec.LookPath("clickhouse-server")
	if err != nil {
		return errors.New("clickhouse-server not found: install the clickhouse-server package (make run does)")
	}
	return s.launch(ctx, bin)
}
