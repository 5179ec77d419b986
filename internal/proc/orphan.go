package proc

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
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

// StopSelf stops this process as a job-control stop (SIGTSTP's default action), so that the shell that started it
// sees its job stopped, and returns once SIGCONT continues it: a Stopper's Stop, for a process that keeps no Stopper
// (see there: parentGone, and why the parent's death sends SIGCONT for the moment of the stop).
func StopSelf() (parentGone bool, err error) {
	s, err := NewStopper()
	if err != nil {
		return false, err
	}
	defer s.Close()
	if _, err := s.WatchContinues(); err != nil { // not armed: a SIGCONT came, Stop returns at once
		return false, err
	}
	return s.Stop()
}

// sigaction is the kernel's struct sigaction on 64-bit Linux (handler, flags, restorer, mask), copied as it is.
type sigaction [4]uint64

func rtSigaction(sig syscall.Signal, act, old *sigaction) error {
	_, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(act)),
		uintptr(unsafe.Pointer(old)), 8, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// StoppedOrGone reports whether pid is stopped (Stopped) or has ended (a zombie, or gone): what a job-control stop
// waits for before tpurun stops itself.
func StoppedOrGone(procRoot string, pid int) bool {
	switch state(procRoot, pid) {
	case 0, 'Z', 'X':
		return true
	}
	return Stopped(procRoot, pid)
}

// Stopped reports whether pid is stopped by a signal: state T or t in /proc/PID/stat, or D (an uninterruptible wait)
// with a stopped child. The latter is a parent in vfork whose child a stop signal reached before its exec (dash,
// Debian's /bin/sh, and Go's os/exec start commands with vfork): the parent waits for that exec, its own stop pending,
// until the child is continued; the job is stopped all the same, and SIGCONT resumes both.
func Stopped(procRoot string, pid int) bool {
	switch state(procRoot, pid) {
	case 'T', 't':
		return true
	case 'D':
	default:
		return false
	}
	dir := filepath.Join(procRoot, strconv.Itoa(pid), "task")
	tasks, _ := os.ReadDir(dir) // the thread that called vfork need not be the first
	for _, task := range tasks {
		b, _ := readSmall(filepath.Join(dir, task.Name(), "children"), nil)
		for _, f := range bytes.Fields(b) {
			if kid, err := strconv.Atoi(string(f)); err == nil {
				if st := state(procRoot, kid); st == 'T' || st == 't' {
					return true
				}
			}
		}
	}
	return false
}

// state is the state letter of /proc/PID/stat (field 3: R, S, D, T, t, Z, X, ...), 0 when pid is gone.
func state(procRoot string, pid int) byte {
	b, _ := readSmall(filepath.Join(procRoot, strconv.Itoa(pid), "stat"), nil)
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2] // after ") "
}
