package proc

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
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
// sees its job stopped, and returns once SIGCONT continues it. It reports parentGone when the process that started
// this one exited meanwhile (before the stop, or while stopped): then nothing that does job control is left to
// continue the job, and the caller should resume what it stopped.
//
// A look at GroupOrphaned followed by SIGSTOP cannot be made safe, and the kernel's own guards do not close the
// window for a process of many threads: it discards a job-control stop for an orphaned group, and continues a
// stopped group that becomes orphaned, but a shell that dies while this process's threads are still entering the
// stop leaves it stopped forever. So for the moment of the stop the parent's death is made to send SIGCONT
// (PR_SET_PDEATHSIG on this thread, the earlier setting put back after; if that was a signal, as with
// ExitWithParent, and the parent died, it is raised then), and SIGTSTP's disposition is the default one, sent to
// this locked thread alone so that the kernel acts on it before tgkill returns.
func StopSelf() (parentGone bool, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cur int32 // PR_GET_PDEATHSIG writes the signal to the address it is given
	if _, _, errno := unix.RawSyscall6(unix.SYS_PRCTL, unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&cur)), 0, 0, 0, 0); errno != 0 {
		return false, fmt.Errorf("stop: prctl(PR_GET_PDEATHSIG): %w", errno)
	}
	parent := os.Getppid()
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGCONT), 0, 0, 0); err != nil {
		return false, fmt.Errorf("stop: prctl(PR_SET_PDEATHSIG): %w", err)
	}
	defer func() {
		_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(cur), 0, 0, 0)
		if parentGone = os.Getppid() != parent; parentGone && cur != 0 {
			_ = syscall.Kill(os.Getpid(), syscall.Signal(cur)) // what the parent's death would have sent
		}
	}()
	if os.Getppid() != parent {
		return true, nil // gone already: nothing to stop for
	}
	var dfl, old sigaction // zero: SIG_DFL, no flags, an empty mask, whatever the architecture's layout
	if err := rtSigaction(syscall.SIGTSTP, &dfl, &old); err != nil {
		return false, fmt.Errorf("stop: sigaction(SIGTSTP, SIG_DFL): %w", err)
	}
	err = unix.Tgkill(os.Getpid(), unix.Gettid(), syscall.SIGTSTP)
	if rerr := rtSigaction(syscall.SIGTSTP, &old, nil); rerr != nil {
		return false, fmt.Errorf("stop: restoring the SIGTSTP handler: %w", rerr)
	}
	if err != nil {
		return false, fmt.Errorf("stop: tgkill(SIGTSTP): %w", err)
	}
	return false, nil
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
