package process

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The default range of per-replica users (Config.UIDs): uids no account
// of a Debian machine has, far above its users (1000-59999), systemd's
// dynamic users (61184-65519) and the subordinate ranges container tools
// hand out from 100000. Each replica runs as one uid of the range, with
// the group of the same number, while it runs.
const (
	DefaultUIDFirst = 1_500_000_000
	DefaultUIDCount = 65536
)

// UIDsShared turns per-replica users off (Config.UIDs): every runtime runs
// as RunAs, so runtimes can read each other's files and processes.
const UIDsShared = "shared"

// uidRange is the per-replica users: count uids from first (count 0: off).
type uidRange struct{ first, count uint32 }

// parseUIDs reads Config.UIDs: "" (the default range), UIDsShared, or
// "FIRST-LAST".
func parseUIDs(s string) (uidRange, error) {
	switch s {
	case "":
		return uidRange{DefaultUIDFirst, DefaultUIDCount}, nil
	case UIDsShared:
		return uidRange{}, nil
	}
	a, b, ok := strings.Cut(s, "-")
	first, err1 := strconv.ParseUint(a, 10, 32)
	last, err2 := strconv.ParseUint(b, 10, 32)
	if !ok || err1 != nil || err2 != nil || first == 0 || last < first || last >= 1<<32-1 {
		return uidRange{}, fmt.Errorf("process driver: uid range %q: want FIRST-LAST, above 0 (root) and below 4294967295", s)
	}
	return uidRange{uint32(first), uint32(last - first + 1)}, nil
}

// takeUIDLocked gives r the lowest free uid of the range; false when the
// range is off, the agent is not root, or every uid is in use.
func (d *Driver) takeUIDLocked(r *replica, want uint32) bool {
	if d.uids.count == 0 || os.Geteuid() != 0 {
		return false
	}
	if want >= d.uids.first && want-d.uids.first < d.uids.count {
		if _, used := d.uidOwner[want]; !used {
			d.uidOwner[want], r.uid = r, want
			return true
		}
	}
	for i := range d.uids.count {
		u := d.uids.first + i
		if _, used := d.uidOwner[u]; !used {
			d.uidOwner[u], r.uid = r, u
			return true
		}
	}
	return false
}

// releaseUIDLocked frees r's uid.
func (d *Driver) releaseUIDLocked(r *replica) {
	if r.uid != 0 && d.uidOwner[r.uid] == r {
		delete(d.uidOwner, r.uid)
	}
}

// giveModelDir makes a model directory that is the replica's alone (the
// artifact cache's replicas/<id>, Launch.Private) enterable by the
// replica's user only: its files are hard links to the cache's blobs,
// readable by anyone who reaches them, and the blobs' own directory is the
// agent's, so this directory is the only way to them.
func giveModelDir(dir string, uid uint32) error {
	if err := os.Chown(dir, int(uid), int(uid)); err != nil {
		return fmt.Errorf("model dir: %w", err)
	}
	if err := os.Chmod(dir, 0o500); err != nil {
		return fmt.Errorf("model dir: %w", err)
	}
	return nil
}
