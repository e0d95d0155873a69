//go:build linux

package versioncheck

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// childAttr is how a validation child is started: as the sandbox user
// (uid, gid; negative: not switched) when the control plane is root, in new
// network, IPC and UTS namespaces when ns (as root directly; otherwise
// inside a new user namespace that maps only the control plane's own uid),
// and killed when the control plane dies.
func childAttr(uid, gid int, ns bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	root := os.Geteuid() == 0
	if root && uid >= 0 && gid >= 0 {
		a.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	}
	if !ns {
		return a
	}
	a.Cloneflags = syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS
	if !root {
		a.Cloneflags |= syscall.CLONE_NEWUSER
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Geteuid(), HostID: os.Geteuid(), Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getegid(), HostID: os.Getegid(), Size: 1}}
		a.GidMappingsEnableSetgroups = false
	}
	return a
}

// nsRefused reports whether starting a child with namespaces failed in a
// way that means the kernel or its configuration forbids them here (no
// CAP_SYS_ADMIN, unprivileged user namespaces off, namespace limits).
func nsRefused(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) ||
		errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EUSERS) || errors.Is(err, syscall.EACCES)
}

// limitSelf sets the validation child's limits on itself, before it reads
// any file of the version: its address space, open files, processes
// (threads count; only when it runs as a user of its own, since the count
// is the user's), CPU seconds, file size (it writes no file), no core
// dumps; then no new privileges and the seccomp filter.
func limitSelf(l ChildLimits) error {
	set := func(name string, r int, v uint64) error {
		if err := syscall.Setrlimit(r, &syscall.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	if l.MemoryMB > 0 {
		if err := set("RLIMIT_AS", syscall.RLIMIT_AS, uint64(l.MemoryMB)<<20); err != nil {
			return err
		}
	}
	if err := set("RLIMIT_NOFILE", syscall.RLIMIT_NOFILE, childMaxFiles); err != nil {
		return err
	}
	if l.MaxProcesses > 0 {
		if err := set("RLIMIT_NPROC", unix.RLIMIT_NPROC, uint64(l.MaxProcesses)); err != nil {
			return err
		}
	}
	if l.CPUSeconds > 0 {
		if err := set("RLIMIT_CPU", syscall.RLIMIT_CPU, uint64(l.CPUSeconds)); err != nil {
			return err
		}
	}
	if err := set("RLIMIT_FSIZE", syscall.RLIMIT_FSIZE, childMaxFileBytes); err != nil {
		return err
	}
	if err := set("RLIMIT_CORE", syscall.RLIMIT_CORE, 0); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	return installSeccomp()
}
