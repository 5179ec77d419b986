package proc

import (
	"errors"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// awaitExit parks the calling goroutine in Go's network poller until the process behind pidfd has exited (a
// pidfd becomes readable then). Waiting there instead of in a blocking wait syscall keeps hundreds of workers
// from holding hundreds of OS threads; the wait that follows returns at once. Without a pidfd (old kernels) it
// returns at once and the caller's wait blocks as before. pidfd stays open (it is dup'ed for the poller).
func awaitExit(pidfd int) {
	if pidfd < 0 {
		return
	}
	dup, err := unix.FcntlInt(uintptr(pidfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return
	}
	if err := syscall.SetNonblock(dup, true); err != nil {
		_ = syscall.Close(dup)
		return
	}
	f := os.NewFile(uintptr(dup), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool { return exited(int(fd)) })
}

// exited reports, without reaping it, whether the process behind pidfd has exited:
// waitid(P_PIDFD, pidfd, WEXITED|WNOHANG|WNOWAIT) sets si_signo (SIGCHLD) only for an exited child, and leaves
// it 0 when the child is still running.
func exited(pidfd int) bool {
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PIDFD, pidfd, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil {
		return true // nothing to wait for here: let the real wait report it
	}
	return info.Signo != 0
}

// peekExit waits until child pid has exited and returns how, without reaping it (waitid WNOWAIT). ok is false
// when there is nothing to wait for (already reaped by someone else): the caller reaps at once then.
func peekExit(pid int) (code int, sig syscall.Signal, ok bool) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || info.Signo == 0 {
			return 0, 0, false
		}
		_, code, sig = childExit(&info)
		return code, sig, true
	}
}

// childExit reads the SIGCHLD fields of a siginfo that waitid filled in for an exited child: its pid, and its
// exit code (si_status for CLD_EXITED) or the signal that killed it (si_status for CLD_KILLED and CLD_DUMPED; code
// -1 then). The union of the siginfo starts after three ints, aligned to a pointer; si_pid, si_uid and si_status
// are its first three ints (the kernel's generic layout, on every Linux architecture).
func childExit(info *unix.Siginfo) (pid, code int, sig syscall.Signal) {
	const union = (12 + unsafe.Sizeof(uintptr(0)) - 1) &^ (unsafe.Sizeof(uintptr(0)) - 1)
	base := unsafe.Pointer(info)
	pid = int(*(*int32)(unsafe.Add(base, union)))
	status := int(*(*int32)(unsafe.Add(base, union+8)))
	switch info.Code {
	case cldKilled, cldDumped:
		return pid, -1, syscall.Signal(status)
	}
	return pid, status, 0
}

// The si_code values of SIGCHLD for a child that was killed, and killed with a core dump.
const (
	cldKilled = 2
	cldDumped = 3
)
