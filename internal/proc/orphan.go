package proc

import (
	"os"
	"strconv"
)

// GroupOrphaned reports whether process group pgid is orphaned in the POSIX sense: no member has a parent in another
// group of the same session, so no shell could continue it once stopped (the kernel discards stop signals for it).
// A session leader's group is; so is a shell's job once the shell has exited. It reads every /proc/PID/stat under
// procRoot: call it on a job-control event, not in a loop.
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
		st, ok := readStat(procRoot, pid, &buf)
		if !ok || st.pgid != pgid || st.ppid == 0 {
			continue
		}
		if parent, ok := readStat(procRoot, st.ppid, &buf); ok && parent.pgid != pgid && parent.sid == st.sid {
			return false
		}
	}
	return true
}

// StoppedOrGone reports whether pid is stopped (Stopped) or has ended (a zombie, or gone): what a job-control stop
// waits for before tpurun stops itself.
func StoppedOrGone(procRoot string, pid int) bool {
	var buf []byte
	return zombie(procRoot, pid, &buf) || Stopped(procRoot, pid)
}

// Stopped reports whether pid is stopped by a signal: state T or t, or D with a stopped child: a parent in vfork
// (dash, Go's os/exec) whose child was stopped before its exec waits for it; SIGCONT resumes both.
func Stopped(procRoot string, pid int) bool {
	switch state(procRoot, pid) {
	case 'T', 't':
		return true
	case 'D':
	default:
		return false
	}
	var buf []byte
	kids, _ := children(procRoot, pid, &buf) // the thread that called vfork need not be the first
	for _, kid := range kids {
		if st := state(procRoot, kid); st == 'T' || st == 't' {
			return true
		}
	}
	return false
}

// state is the state letter of /proc/PID/stat (see procStat), 0 when pid is gone.
func state(procRoot string, pid int) byte {
	var buf []byte
	st, _ := readStat(procRoot, pid, &buf)
	return st.state
}
