package proc

import (
	"errors"
	"strconv"
	"syscall"

	"go.uber.org/zap"
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

// reapOrphansIn reaps every exited orphan among pids (children of this process); the owned ones are skipped
// without a system call.
func (r *Reaper) reapOrphansIn(pids []int) {
	for _, pid := range pids {
		r.reapOrphan(pid)
	}
}

// reapOrphan reaps pid if it is an exited child that was not started through the reaper (owned: it was, and is
// left alone), holding the lock from the check to the reap, so that the pid cannot meanwhile become an owned one.
func (r *Reaper) reapOrphan(pid int) (owned bool) {
	r.mu.Lock()
	if _, ok := r.owned[pid]; ok {
		r.mu.Unlock()
		return true
	}
	var ws syscall.WaitStatus
	got, err := wait4(pid, &ws, syscall.WNOHANG, nil)
	for errors.Is(err, syscall.EINTR) {
		got, err = wait4(pid, &ws, syscall.WNOHANG, nil)
	}
	if err != nil || got <= 0 {
		r.mu.Unlock()
		return false
	}
	r.orphans++
	r.mu.Unlock()
	r.orphanReaped(got, ws)
	return false
}

func (r *Reaper) orphanReaped(pid int, ws syscall.WaitStatus) {
	r.log.Debug("reaped orphan", zap.Int("pid", pid), zap.Int("status", int(ws)))
	select {
	case r.reaped <- struct{}{}:
	default: // one pending token says it all: the subtree changed
	}
}

// leaderChildren are the children of this process's first thread: where the kernel re-parents orphans (to the
// first live thread of the subreaper, or of PID 1). The processes started through the reaper are the starter
// thread's children, not its: the list stays as short as the orphans are few.
func (r *Reaper) leaderChildren() []int {
	me := strconv.Itoa(self())
	var b []byte
	b, r.buf, _ = readFile("/proc/"+me+"/task/"+me+"/children", r.buf)
	return pids(b)
}
