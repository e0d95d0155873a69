// Package pgproc runs a private PostgreSQL server as a child process in a data
// directory of its own. It is what `modelplane dev` and the test harness use; it
// never touches a system-wide cluster. When the current user is root the server
// runs as the unprivileged "postgres" user, because PostgreSQL refuses root.
package pgproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"modelplane/internal/freeport"
)

// Server is a running PostgreSQL child process.
type Server struct {
	Dir  string
	Port int
	cmd  *exec.Cmd
	done chan error
}

// URL returns a connection string for database name.
func (s *Server) URL(name string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.Port, name)
}

// binDir finds the PostgreSQL server binaries; Debian keeps them out of PATH.
func binDir() (string, error) {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(matches) > 0 {
		return filepath.Dir(matches[len(matches)-1]), nil
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("postgresql server not found: install the postgresql package (make run does)")
}

// credential returns the uid/gid to run PostgreSQL as, or nil to keep the
// current user.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs a postgres user to drop privileges to: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func command(cred *syscall.Credential, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGTERM}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd
}

// Start initialises dir (when it holds no cluster yet) and starts a server on a
// free port. It returns once the server accepts connections.
func Start(ctx context.Context, dir string) (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("postgres data directory: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("postgres data directory: %w", err)
		}
		if err := checkReachable(dir, cred); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		out, err := command(cred, filepath.Join(bin, "initdb"), "-D", dir, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync").CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("initdb: %w: %s", err, out)
		}
	}
	// A server killed hard leaves its pid file behind; the next start would refuse.
	_ = os.Remove(filepath.Join(dir, "postmaster.pid"))
	port, err := freeport.Get()
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := command(cred, filepath.Join(bin, "postgres"), "-D", dir, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=300", "-c", "shared_buffers=128MB")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	s := &Server{Dir: dir, Port: port, cmd: cmd, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait(); logf.Close() }()
	if err := s.waitReady(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Reachable reports whether PostgreSQL, run as the user Start would run it
// as, can reach dir: as root it runs as "postgres", which cannot enter a
// directory under, say, a 0700 home of root's.
func Reachable(dir string) error {
	cred, err := credential()
	if err != nil || cred == nil {
		return err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return err
	}
	return checkReachable(dir, cred)
}

func checkReachable(dir string, cred *syscall.Credential) error {
	for p := filepath.Dir(dir); p != "/"; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm()&0o001 == 0 && st.Uid != cred.Uid {
			return fmt.Errorf("postgres (uid %d) cannot reach %s: %s is not searchable by others", cred.Uid, dir, p)
		}
	}
	return nil
}

func (s *Server) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			c.Close(ctx)
			return nil
		}
		select {
		case err := <-s.done:
			log, _ := os.ReadFile(filepath.Join(s.Dir, "server.log"))
			return fmt.Errorf("postgres exited: %v: %s", err, tail(string(log)))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not accept connections within 60s: %w", err)
		}
	}
}

// Stop asks for a fast shutdown and waits for the process to exit.
func (s *Server) Stop() {
	if s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return strings.Join(lines, "\n")
}
