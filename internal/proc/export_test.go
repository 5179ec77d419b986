package proc

import (
	"errors"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// What the tests of the reaper see of its insides. Each hook is set by a re-executed test binary before it makes
// its reaper, and never reset: nothing else runs in that process.

// CountWaits makes the reaper count its waitid calls; the returned function reads the counts: those that wait for
// one pid (P_PID: a look at one child) and those that wait for any child (P_ALL).
func CountWaits() (counts func() (onePID, anyChild int)) {
	var one, anyChild atomic.Int64
	inner := waitid
	waitid = func(idType, id int, info *unix.Siginfo, options int) error {
		switch idType {
		case unix.P_PID:
			one.Add(1)
		case unix.P_ALL:
			anyChild.Add(1)
		}
		return inner(idType, id, info, options)
	}
	return func() (int, int) { return int(one.Load()), int(anyChild.Load()) }
}

// WithoutPidfd makes the reaper run as on a kernel without pidfds (before Linux 5.3).
func WithoutPidfd() {
	pidfdOpen = func(int, int) (int, error) { return -1, syscall.ENOSYS }
}

// StarterTid is the thread id of r's starter thread: the parent thread of every process started through r.
func StarterTid(r *Reaper) int {
	tid := 0
	r.starter.run(func() { tid = unix.Gettid() })
	return tid
}

// Start starts cmd without a reaper and without holding it: onExit, if not nil, is called once from the waiting
// goroutine after the process has been reaped.
func Start(cmd *exec.Cmd, onExit func(*Process)) (*Process, error) {
	return startOwn(cmd, onExit, false)
}

// Alive reports whether a process with this pid exists (kill(pid, 0) succeeds or fails with EPERM).
func Alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// SweepTreeOf sweeps the subtree of root under procRoot as Reaper.Sweep sweeps this process's.
func SweepTreeOf(procRoot string, root int) error {
	_, err := sweepTree(procRoot, root, func(int) (bool, bool) { return true, true }, nil, time.Second)
	return err
}
