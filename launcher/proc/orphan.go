package proc

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// GroupOrphaned reports whether process group pgid is orphaned in the POSIX sense: no member has a parent in another
// group of the same session, so no shell (nothing that does job control) could continue it once it stopped. The
// kernel discards SIGTSTP, SIGTTIN and SIGTTOU for such a group, and sends SIGHUP and SIGCONT to one that becomes
// orphaned while a member is stopped. A session leader's group is orphaned; so is a shell's background job once that
// shell has exited. It reads every /proc/PID/stat under procRoot: call it on a job-control event, not in a loop.
func GroupOrphaned(procRoot string, pgid int) bool {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return false // unknown: not orphaned, as without this check
	}
	var buf []byte
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, group, sess, ok := statIDs(procRoot, pid, &buf)
		if !ok || group != pgid || ppid == 0 {
			continue
		}
		if _, pgroup, psess, ok := statIDs(procRoot, ppid, &buf); ok && pgroup != pgid && psess == sess {
			return false
		}
	}
	return true
}

// statIDs reads the parent, process group and session of pid from /proc/PID/stat (fields 4, 5 and 6).
func statIDs(procRoot string, pid int, buf *[]byte) (ppid, pgid, sid int, ok bool) {
	var b []byte
	b, *buf = readSmall(filepath.Join(procRoot, strconv.Itoa(pid), "stat"), *buf)
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3 (state)
	if len(f) < 4 {
		return 0, 0, 0, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgid, err2 := strconv.Atoi(string(f[2]))
	sid, err3 := strconv.Atoi(string(f[3]))
	return ppid, pgid, sid, err1 == nil && err2 == nil && err3 == nil
}
