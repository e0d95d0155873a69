// Package chproc runs a private ClickHouse server as a child process with its
// data under a directory of its own, on free ports. `modelplane dev` and the
// test harness use it; production points MP_CLICKHOUSE_URL at a real cluster.
package chproc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"modelplane/internal/freeport"
)

// Server is a running ClickHouse child process.
type Server struct {
	Dir      string
	TCPPort  int
	HTTPPort int
	cmd      *exec.Cmd
	// exited is closed when the process of the current launch has exited;
	// waitErr is its exit error, readable once exited is closed.
	exited  chan struct{}
	waitErr error
}

// Addr is the native-protocol address for clickhouse-go.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.TCPPort) }

// URL returns a clickhouse:// URL for database name.
func (s *Server) URL(name string) string {
	return fmt.Sprintf("clickhouse://default@%s/%s", s.Addr(), name)
}

// PID is the server's process id, while it runs (0 before the first
// launch): benchmarks read its CPU time from /proc.
func (s *Server) PID() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

const systemConfig = "/etc/clickhouse-server/config.xml"

// Start starts ClickHouse with its data in dir (kept between starts).
func Start(ctx context.Context, dir string) (*Server, error) {
	bin, err := exec.LookPath("clickhouse-server")
	if err != nil {
		return nil, errors.New("clickhouse-server not found: install the clickhouse-server package (make run does)")
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, err
	}
	s := &Server{Dir: dir}
	if s.TCPPort, err = freeport.Get(); err != nil {
		return nil, err
	}
	if s.HTTPPort, err = freeport.Get(); err != nil {
		return nil, err
	}
	if err := s.launch(ctx, bin); err != nil {
		return nil, err
	}
	return s, nil
}

// launch runs the server on s's directory and TCP and HTTP ports and waits
// until it answers.
func (s *Server) launch(ctx context.Context, bin string) error {
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
		return fmt.Errorf("start clickhouse: %w", err)
	}
	exited := make(chan struct{})
	s.cmd, s.exited = cmd, exited
	go func() {
		s.waitErr = cmd.Wait()
		out.Close()
		close(exited)
	}()
	if err := s.waitReady(ctx); err != nil {
		s.Stop()
		return err
	}
	return nil
}

func (s *Server) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	url := fmt.Sprintf("http://127.0.0.1:%d/ping", s.HTTPPort)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.exited:
			err := s.waitErr
			log, _ := os.ReadFile(filepath.Join(s.Dir, "error.log"))
			if len(log) > 2000 {
				log = log[len(log)-2000:]
			}
			return fmt.Errorf("clickhouse exited: %v: %s", err, log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("clickhouse did not answer /ping within 60s")
		}
	}
}

// Stop terminates the server and waits for it to exit.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	if !s.running() {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
	}
}

// running reports whether the process of the current launch still runs.
func (s *Server) running() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}
