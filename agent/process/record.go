package process

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"modelplane/busapi"
)

// record is what the driver keeps on disk of one running replica, so that
// the driver of a restarted agent can take it over.
type record struct {
	ID       string `json:"id"`
	SpecHash string `json:"spec_hash"`
	Runtime  string `json:"runtime"`
	ModelDir string `json:"model_dir,omitempty"`
	PID      int    `json:"pid"`
	// StartTicks is the process's start time in clock ticks since boot
	// (/proc/<pid>/stat field 22). With the pid it names one process: a
	// recycled pid has another start time and is never adopted or killed.
	StartTicks uint64 `json:"start_ticks"`
	Port       int    `json:"port"`
	// InnerPort is the runtime's own loopback port behind the agent's
	// token guard (0: the runtime listens on Port itself).
	InnerPort int   `json:"inner_port,omitempty"`
	Cores     []int `json:"cores"`
	// UID is the replica's own user (0: RunAs or the agent's).
	UID     uint32 `json:"uid,omitempty"`
	Devices string `json:"devices,omitempty"`
	// Launch is what the process was started with, which an adopting
	// driver reports as its own.
	Launch *busapi.Launch `json:"launch,omitempty"`
	// MetricsPort is the runtime's own metrics port on 127.0.0.1, for an
	// entry with catalog.Entry.MetricsPort (0: none).
	MetricsPort int `json:"metrics_port,omitempty"`
}

func (d *Driver) recordPath(id string) string { return filepath.Join(d.cfg.StateDir, id+".json") }

func (d *Driver) logPath(id string) string { return filepath.Join(d.cfg.StateDir, id+".log") }

func (d *Driver) loadRecord(id string) (record, error) {
	data, err := os.ReadFile(d.recordPath(id))
	if err != nil {
		return record{}, fmt.Errorf("no record of replica %s: %w", id, err)
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		return record{}, fmt.Errorf("record of replica %s: %w", id, err)
	}
	if rec.ID != id || rec.PID <= 0 {
		return record{}, fmt.Errorf("record of replica %s is not its own", id)
	}
	return rec, nil
}

// saveRecord replaces the record atomically: a torn record would make the
// next agent start a second copy beside the running one.
func (d *Driver) saveRecord(rec record) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp := d.recordPath(rec.ID) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write record: %w", err)
	}
	f, err := os.Open(tmp)
	if err == nil {
		err = f.Sync()
		f.Close()
	}
	if err == nil {
		err = os.Rename(tmp, d.recordPath(rec.ID))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write record: %w", err)
	}
	return nil
}

// procStat reads a process's state letter and start time from
// /proc/<pid>/stat. The command name (field 2) may hold spaces and
// parentheses, so fields are counted from its closing one.
func procStat(pid int) (state byte, startTicks uint64, err error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, errors.New("malformed stat")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); field 22 (starttime) is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, errors.New("malformed stat")
	}
	ticks, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("malformed stat: %w", err)
	}
	return f[0][0], ticks, nil
}

// alive reports whether pid is still the process that started at
// startTicks and has not exited (a zombie has).
func alive(pid int, startTicks uint64) bool {
	if pid <= 0 {
		return false
	}
	st, ticks, err := procStat(pid)
	if err != nil || ticks != startTicks || st == 'Z' || st == 'X' {
		return false
	}
	return unix.Kill(pid, 0) == nil || errors.Is(unix.Kill(pid, 0), unix.EPERM)
}
