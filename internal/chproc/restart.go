package chproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"modelplane/internal/freeport"
)

// Kill ends the server at once with SIGKILL, as a crash or the OOM killer
// would, and waits for it to exit. Restart brings it back.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil || s.cmd.ProcessState != nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	// Put the exit back so that a later Stop returns at once.
	s.done <- <-s.done
}

// Restart starts a stopped or killed server again with the same directory
// and the same TCP and HTTP ports, so that clients holding its address (a
// clickhouse-go pool) reconnect to it as they would to a production server
// coming back. Outage tests use it.
func (s *Server) Restart(ctx context.Context) error {
	if s.cmd != nil && s.cmd.ProcessState == nil {
		return errors.New("clickhouse: restart of a server that is still running")
	}
	bin, err := exec.LookPath("clickhouse-server")
	if err != nil {
		return errors.New("clickhouse-server not found: install the clickhouse-server package (make run does)")
	}
	interserver, err := freeport.Get()
	if err != nil {
		return err
	}
	dir := s.Dir
	cmd := exec.Command(bin, "--config-file="+systemConfig, "--",
		"--path="+filepath.Join(dir, "data")+"/",
		"--tmp_path="+filepath.Join(dir, "tmp")+"/",
		"--user_files_path="+filepath.Join(dir, "user_files")+"/",
		"--format_schema_path="+filepath.Join(dir, "format_schemas")+"/",
		"--tcp_port="+strconv.Itoa(s.TCPPort),
		"--http_port="+strconv.Itoa(s.HTTPPort),
		"--interserver_http_port="+strconv.Itoa(interserver),
		"--listen_host=127.0.0.1",
		"--logger.level=warning",
		"--logger.log="+filepath.Join(dir, "server.log"),
		"--logger.errorlog="+filepath.Join(dir, "error.log"))
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	out, err := os.OpenFile(filepath.Join(dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("restart clickhouse: %w", err)
	}
	s.cmd, s.done = cmd, make(chan error, 1)
	done := s.done
	go func() { done <- cmd.Wait(); out.Close() }()
	if err := s.waitReady(ctx); err != nil {
		s.Stop()
		return err
	}
	return nil
}
