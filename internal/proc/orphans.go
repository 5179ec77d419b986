package proc

import (
	"errors"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// reapOrphans reaps the orphans that waitid(P_ALL, WNOWAIT) finds exited, one after the other, until it finds none
// (false) or finds a process started through this reaper (true): the exit of that one is its pidfd's to report,
// and it hides any other zombie behind it, which only a list of the children shows.
func (r *Reaper) reapOrphans() (hidden bool) {
	for range 1 << 12 {
		var info unix.Siginfo
		err := waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || info.Signo == 0 {
			return false // no child, or none exited
		}
		pid, _, _ := childExit(&info)
		if r.reapOrphan(pid) {
			return true
		}
	}
	return true
}

// reapOrphan reaps pid if it is an exited child that was not started through the reaper (owned: it was, and is
// left alone). No pid becomes an owned one meanwhile: the caller holds forkMu.
func (r *Reaper) reapOrphan(pid int) (owned bool) {
	r.mu.Lock()
	_, owned = r.owned[pid]
	r.mu.Unlock()
	if !owned {
		r.reapPID(pid)
	}
	return owned
}

// leaderChildren are the children of this process's first thread: where the kernel re-parents orphans (to the
// first live thread of the subreaper, or of PID 1). The processes started through the reaper are the starter
// thread's children, not its: the list stays as short as the orphans are few.
func (r *Reaper) leaderChildren() []int {
	me := strconv.Itoa(os.Getpid())
	var b []byte
	b, r.buf, _ = readFile("/proc/"+me+"/task/"+me+"/children", r.buf)
	return pids(b)
}
