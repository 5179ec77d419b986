package proc

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ExitWithParent makes this process send itself sig when the process that started it exits, so a launcher whose
// caller is killed (a Ray actor, a notebook) stops its workers. A parent already gone is ErrParentGone.
//
// PR_SET_PDEATHSIG would fire when the forking thread exits (a ThreadPoolExecutor's worker) while its process lives
// on, so the watch is a pidfd of the parent process, readable once its whole thread group has exited, waited on in
// Go's poller. getppid is read again after pidfd_open: unchanged, the pidfd names the live parent, not a process
// that took its pid. With no parent (getppid 0: PID 1 of a container) there is nothing to do.
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
	go func() {
		if awaitPidfd(fd) == nil {
			_ = syscall.Kill(os.Getpid(), sig)
		}
	}()
	return nil
}

// ParentPoll is how often the parent is looked at where no pidfd can watch it (pidfd_open missing: a kernel before
// 5.3; refused: a container's seccomp profile before Docker 20.10): the parent's exit is then noticed within it.
const ParentPoll = 250 * time.Millisecond

// watchParentByPolling sends this process sig once getppid is no longer parent, looking every so often until stop
// is closed (nil: never): getppid changes when the parent process exits, not a thread of it, and no sandbox
// refuses it.
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
