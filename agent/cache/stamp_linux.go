package cache

import (
	"os"
	"syscall"
)

// stampOf is what identifies a file's content without reading it: a write,
// a truncation, a chmod or a rename over it changes the inode or the change
// time, which only the kernel sets.
func stampOf(fi os.FileInfo) (stamp, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return stamp{}, false
	}
	return stamp{Size: fi.Size(), Ino: st.Ino, Dev: uint64(st.Dev), CtimeNS: st.Ctim.Nano(), MtimeNS: fi.ModTime().UnixNano()}, true
}
