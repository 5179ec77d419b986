package testutil

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
	"tpurun/internal/freeport"

	"golang.org/x/sys/unix"
)

// WaitFor polls cond until it returns nil, and fails the test naming what it waited for (and cond's last answer)
// when Deadline passes first. The poll starts at a millisecond and backs off to 20 ms.
func WaitFor(t testing.TB, what string, cond func() error) {
	t.Helper()
	if err := Poll(what, cond); err != nil {
		t.Fatal(err)
	}
}

// Poll is WaitFor for a goroutine other than the test's (which may not call t.Fatal): it returns an error naming
// what when Deadline passes first.
func Poll(what string, cond func() error) error {
	if err := poll(Deadline(), cond); err != nil {
		return fmt.Errorf("waited %s for %s: %w", Deadline(), what, err)
	}
	return nil
}

// Eventually is WaitFor for a condition that holds or not.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	WaitFor(t, what, func() error {
		if cond() {
			return nil
		}
		return errors.New("not yet")
	})
}

// poll runs cond until it returns nil or within passes; it returns cond's last error then.
func poll(within time.Duration, cond func() error) error {
	deadline := time.Now().Add(within)
	pause := time.Millisecond
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(pause)
		pause = min(pause*2, 20*time.Millisecond)
	}
}

// WaitForFile waits until path exists and returns its content.
func WaitForFile(t testing.TB, path string) []byte {
	t.Helper()
	var b []byte
	WaitFor(t, "the file "+path, func() error {
		var err error
		b, err = os.ReadFile(path)
		return err
	})
	return b
}

// WaitListening waits until something accepts TCP connections on addr.
func WaitListening(t testing.TB, addr string) {
	t.Helper()
	WaitFor(t, "a listener on "+addr, func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err
	})
}

// WaitGone waits until pid no longer exists: kill(pid, 0) == ESRCH. A zombie re-parented to this test binary
// (a subreaper, see SetSubreaper) is reaped first: it is dead, but it holds its pid until reaped.
func WaitGone(t testing.TB, pid int) {
	t.Helper()
	WaitFor(t, fmt.Sprintf("pid %d to be gone (kill(pid, 0) == ESRCH)", pid), func() error {
		return gone(pid)
	})
}

func gone(pid int) error {
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill(%d, 0) = %v: %s", pid, err, procState(pid))
	}
	return nil
}

// WaitDead waits until pid has exited: gone, or a zombie nobody reaped yet (state Z or X).
func WaitDead(t testing.TB, pid int) {
	t.Helper()
	WaitFor(t, fmt.Sprintf("pid %d to exit", pid), func() error {
		if Dead(pid) {
			return nil
		}
		return fmt.Errorf("still %s", procState(pid))
	})
}

// Dead reports whether pid is gone or a zombie (state Z or X in /proc/<pid>/stat).
func Dead(pid int) bool {
	s := procState(pid)
	return s == "gone" || s == "Z" || s == "X"
}

// ProcState is the state letter of /proc/<pid>/stat ("R", "S", "Z", ...), or "gone".
func ProcState(pid int) string { return procState(pid) }

// procState is the state letter of /proc/<pid>/stat ("R", "S", "Z", ...), or "gone".
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "gone"
	}
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' && i+2 < len(b) {
			return string(b[i+2])
		}
	}
	return "unreadable"
}

// FreeEndpoint is a loopback host:port that was free a moment ago, below the ephemeral range (freeport.Pick): no
// outgoing connection of a test running beside takes it before the test binds it.
func FreeEndpoint(t testing.TB) string {
	t.Helper()
	port, err := freeport.Pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// Done waits for ch to be closed (or to deliver) and fails the test naming what when Deadline passes first.
func Done[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(Deadline())
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("waited %s for %s", Deadline(), what)
	}
	var zero T
	return zero
}

// WaitExit starts cmd unless it was started, and waits for it to exit: it returns the exit code (-1 when a signal
// ended it). A command still running after Deadline is killed and fails the test, naming it.
func WaitExit(t testing.TB, cmd *exec.Cmd) int {
	t.Helper()
	if cmd.Process == nil {
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(Deadline())
	defer timer.Stop()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("%s: %v", cmd.Args, err)
		}
	case <-timer.C:
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("waited %s for %q to exit; killed it", Deadline(), cmd.Args)
	}
	return cmd.ProcessState.ExitCode()
}

// Watched is a set of processes watched through pidfds opened while each was known to exist: whether each has
// exited stays known after its pid is reused, and those that are zombies of this process (a subreaper test binary
// inherits a dead shell's job) are reaped through their own pidfd, never another test's child that got the pid.
type Watched struct {
	pids []int
	fds  []int // -1 once exited and closed
}

// Watch opens a pidfd for each of pids, closed at the end of the test; a pid already gone is taken as exited.
func Watch(t testing.TB, pids ...int) *Watched {
	t.Helper()
	w := &Watched{pids: pids, fds: make([]int, len(pids))}
	for i, pid := range pids {
		fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
		switch {
		case errors.Is(err, unix.ESRCH):
			fd = -1
		case err != nil:
			t.Fatalf("pidfd_open(%d): %v", pid, err)
		}
		w.fds[i] = fd
	}
	t.Cleanup(func() {
		for _, fd := range w.fds {
			if fd >= 0 {
				_ = unix.Close(fd)
			}
		}
	})
	return w
}

// Running lists the watched processes that have not exited; an exited one that is this process's child is reaped.
func (w *Watched) Running() []int {
	var left []int
	for i, fd := range w.fds {
		if fd < 0 {
			continue
		}
		var info unix.Siginfo
		_ = unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOHANG, nil) // ECHILD when not ours
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, _ := unix.Poll(pfd, 0); n == 1 { // readable: exited (a zombie, or gone)
			_ = unix.Close(fd)
			w.fds[i] = -1
			continue
		}
		left = append(left, w.pids[i])
	}
	return left
}

// WaitExited waits until every watched process has exited, reaping those that are this process's children;
// describe says what is still there (states, a terminal's output) when the wait fails.
func (w *Watched) WaitExited(t testing.TB, what string, describe func(left []int) string) {
	t.Helper()
	WaitFor(t, what, func() error {
		if left := w.Running(); len(left) > 0 {
			return fmt.Errorf("still running: %v\n%s", left, describe(left))
		}
		return nil
	})
}
