package kubetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// proc is one control-plane program running as a child process, its output
// in name.log under the cluster's directory.
type proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	// exited is closed when the process has exited; err is its exit error,
	// readable once exited is closed.
	exited chan struct{}
	err    error
}

func startProc(dir, name, bin string, args ...string) (*proc, error) {
	p := &proc{name: name, logPath: filepath.Join(dir, name+".log"), exited: make(chan struct{})}
	out, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = out, out
	// A group of its own so that Stop reaches everything it started, and
	// SIGTERM when the test binary dies so that no control plane outlives
	// the test process that owned it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := p.cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		out.Close()
		close(p.exited)
	}()
	return p, nil
}

// running reports whether the process still runs.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// failure describes an exit: the exit status and the end of the log.
func (p *proc) failure() error {
	log, _ := os.ReadFile(p.logPath)
	if len(log) > 3000 {
		log = log[len(log)-3000:]
	}
	return fmt.Errorf("%s exited: %v; the end of %s:\n%s", p.name, p.err, p.logPath, log)
}

// stop sends SIGTERM and waits for the exit, killing the group if the
// program does not stop within 20 seconds.
func (p *proc) stop() {
	if p == nil || !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}
