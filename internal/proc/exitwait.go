package proc

import (
	"errors"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// awaitExit parks the calling goroutine in Go's poller until the process behind pidfd has exited, so that hundreds
// of workers hold no OS thread each in a blocking wait. Without a pidfd it returns at once (the caller's wait then
// blocks). pidfd stays open: a dup of it goes to the poller.
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
	_ = awaitPidfd(dup)
}

// awaitPidfd parks the calling goroutine in Go's poller until the process of the non-blocking pidfd fd has exited
// (its whole thread group), and closes fd.
func awaitPidfd(fd int) error {
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Read(func(fd uintptr) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		for errors.Is(err, syscall.EINTR) {
			n, err = unix.Poll(fds, 0)
		}
		return err == nil && n > 0 // readable once the process has exited
	})
}

// peekExit waits until child pid has exited and returns how, without reaping it. ok is false when there is nothing
// to wait for (reaped already).
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

// childExit reads an exited child's pid and exit code, or killing signal (code -1), from waitid's siginfo. Its union
// starts after three ints, aligned to a pointer; si_pid, si_uid and si_status lead it on every Linux architecture.
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
