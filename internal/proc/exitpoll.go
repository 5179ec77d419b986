package proc

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// exitPoll is the epoll set of the pidfds of a Reaper's processes: each exit is one event (EPOLLONESHOT, the pid as
// its data), with no listing of the children on each SIGCHLD. The set waits in Go's poller, holding no thread.
type exitPoll struct {
	f    *os.File // the epoll descriptor
	fd   int
	done chan struct{} // closed when the polling goroutine returned
}

func newExitPoll() (*exitPoll, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	return &exitPoll{f: os.NewFile(uintptr(fd), "pidfds"), fd: fd, done: make(chan struct{})}, nil
}

// ctl watches pidfd, the pidfd of pid, for its exit (op EPOLL_CTL_ADD), or again after an event that was not its
// exit (EPOLL_CTL_MOD).
func (e *exitPoll) ctl(op, pidfd, pid int) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT, Fd: int32(pid)}
	return unix.EpollCtl(e.fd, op, pidfd, &ev)
}

// pollExits is the goroutine that waits for the epoll set to have events and takes them, until the set is closed.
func (r *Reaper) pollExits() {
	defer close(r.exits.done)
	rc, err := r.exits.f.SyscallConn()
	if err != nil {
		return
	}
	events := make([]unix.EpollEvent, 64)
	_ = rc.Read(func(fd uintptr) bool {
		r.drainExits(int(fd), events)
		return false // wait for the next event; ends when the set is closed
	})
}

// drainExits takes every event of the epoll set fd until it has none: the set is waited on edge-triggered.
func (r *Reaper) drainExits(fd int, events []unix.EpollEvent) {
	for {
		n, err := unix.EpollWait(fd, events, 0)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || n <= 0 {
			return
		}
		for _, ev := range events[:n] {
			r.polled(int(ev.Fd))
		}
	}
}

// close takes the last events and stops the polling goroutine.
func (e *exitPoll) close(r *Reaper) {
	r.drainExits(e.fd, make([]unix.EpollEvent, 64))
	_ = e.f.Close()
	<-e.done
}
