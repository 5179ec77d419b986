package proc

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ExitWithParent makes this process send itself sig when the process that started it exits, so a launcher started
// by a program that is killed (a Ray actor, a notebook) stops its workers instead of running on. A parent that has
// already exited (this process was re-parented before the call) is reported as ErrParentGone.
//
// The parent is the process, not the thread that forked this one: PR_SET_PDEATHSIG fires when that thread exits
// (a ThreadPoolExecutor's worker, a Ray actor's method thread), while its process lives on. So the watch is a pidfd
// of the parent process, which becomes readable only once its whole thread group has exited; it waits in Go's
// poller, holding no thread. The pidfd is taken, then getppid is read again: unchanged, the pidfd names the live
// parent, not a process that took its pid after it died. With no parent to watch (getppid 0: PID 1 of a
// container) there is nothing to do.
func ExitWithParent(sig syscall.Signal) error {
	parent := os.Getppid()
	if parent == 0 {
		return nil
	}
	fd, err := unix.PidfdOpen(parent, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return ErrParentGone
	}
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		go watchParentByPolling(parent, sig, ParentPoll, nil) // a kernel before 5.3, or a seccomp profile that refuses it
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd_open(%d), the parent process: %w", parent, err)
	}
	unix.CloseOnExec(fd)
	if os.Getppid() != parent {
		_ = unix.Close(fd)
		return ErrParentGone
	}
	f := os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", parent)) // non-blocking: in Go's poller
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("pidfd of the parent process %d: %w", parent, err)
	}
	go func() {
		defer f.Close()
		if err := rc.Read(parentExited); err == nil {
			_ = syscall.Kill(os.Getpid(), sig)
		}
	}()
	return nil
}

// parentExited is a RawConn.Read callback for a pidfd: true once it is readable (its process has exited); false sends
// the goroutine back to Go's poller until the pidfd's next event.
func parentExited(fd uintptr) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents != 0
}

// ParentPoll is how often the parent is looked at where no pidfd can watch it (pidfd_open missing: a kernel before
// 5.3; refused: a container's seccomp profile before Docker 20.10): the parent's exit is then noticed within it.
const ParentPoll = 250 * time.Millisecond

// watchParentByPolling sends this process sig once its parent is no longer parent, looking every so often until
// stop is closed (nil: for the process's life): getppid changes when the parent process exits (this process is
// re-parented), not when a thread of it does. getppid is a system call of no cost that no sandbox refuses.
func watchParentByPolling(parent int, sig syscall.Signal, every time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if os.Getppid() != parent {
			_ = syscall.Kill(os.Getpid(), sig)
			return
		}
	}
}

// ErrParentGone: the process that started this one has already exited.
var ErrParentGone = errors.New("the parent process has already exited")
