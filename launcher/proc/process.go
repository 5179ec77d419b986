package proc

import (
	"golang.org/x/sys/unix"

	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// ErrNotStarted is returned by Start when the command could not be started.
var ErrNotStarted = errors.New("process not started")

// Process is one started child that leads its own process group. Its exit is delivered once, by whoever waits
// for it: today a goroutine calling cmd.Wait; a PID-1 reaper can deliver the same Exit through the same type.
type Process struct {
	cmd   *exec.Cmd
	pid   int
	start time.Time
	done  chan struct{}
	exit  Exit
}

// Exit is how a process ended, with its resource usage taken from wait4's rusage at exit.
type Exit struct {
	PID      int
	Code     int            // exit code, or -1 when killed by a signal
	Signal   syscall.Signal // the killing signal, 0 when it exited
	Wall     time.Duration  // from Start to the exit being reaped
	MaxRSS   int64          // peak resident set size in bytes (ru_maxrss)
	UserCPU  time.Duration
	SysCPU   time.Duration
	WaitErr  error // a wait error other than a non-zero exit (e.g. exec.ErrWaitDelay), nil normally
	Finished time.Time
}

// Success reports whether the process exited with code 0.
func (e Exit) Success() bool { return e.Signal == 0 && e.Code == 0 }

// ExitStatus is the shell-style status: the exit code, or 128+N when killed by signal N.
func (e Exit) ExitStatus() int {
	if e.Signal != 0 {
		return 128 + int(e.Signal)
	}
	return e.Code
}

// Start starts cmd as the leader of a new process group with Pdeathsig=SIGKILL, so the child dies when the
// starting thread (and so the launcher) dies. The OS thread is locked while starting, because the kernel ties
// the parent-death signal to the thread that forked. onExit, if not nil, is called once from the waiting
// goroutine after the process has been reaped.
func Start(cmd *exec.Cmd, onExit func(*Process)) (*Process, error) {
	prepare(cmd)
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = 2 * time.Second
	}
	pidfd := -1
	cmd.SysProcAttr.PidFD = &pidfd
	p, err := start(cmd)
	if err != nil {
		return nil, err
	}
	go p.wait(onExit, pidfd)
	return p, nil
}

// prepare makes cmd the leader of a new process group that is SIGKILLed when the thread starting it dies.
func prepare(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pgid = 0
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// start starts a prepared cmd with the OS thread locked, because the kernel ties the parent-death signal to the
// thread that forked.
func start(cmd *exec.Cmd) (*Process, error) {
	p := &Process{cmd: cmd, done: make(chan struct{})}
	runtime.LockOSThread()
	p.start = time.Now()
	err := cmd.Start()
	runtime.UnlockOSThread()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNotStarted, cmd.Path, err)
	}
	p.pid = cmd.Process.Pid
	return p, nil
}

func (p *Process) wait(onExit func(*Process), pidfd int) {
	awaitExit(pidfd)
	err := p.cmd.Wait()
	e := Exit{PID: p.pid, Finished: time.Now()}
	e.Wall = e.Finished.Sub(p.start)
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		e.WaitErr = err
	}
	if st := p.cmd.ProcessState; st != nil {
		e.Code = st.ExitCode()
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Signal = ws.Signal()
			e.Code = -1
		}
		if ru, ok := st.SysUsage().(*syscall.Rusage); ok && ru != nil {
			e.MaxRSS = ru.Maxrss * 1024
			e.UserCPU = time.Duration(ru.Utime.Nano())
			e.SysCPU = time.Duration(ru.Stime.Nano())
		}
	} else {
		e.Code = -1
	}
	p.exit = e
	close(p.done)
	if onExit != nil {
		onExit(p)
	}
}

// awaitExit parks the calling goroutine in Go's network poller until the process behind pidfd has exited (a
// pidfd becomes readable then), and closes pidfd. Waiting there instead of in a blocking wait syscall keeps
// hundreds of workers from holding hundreds of OS threads; the wait that follows returns at once. Without a
// pidfd (old kernels) it returns at once and the caller's wait blocks as before.
func awaitExit(pidfd int) {
	if pidfd < 0 {
		return
	}
	if err := syscall.SetNonblock(pidfd, true); err != nil {
		_ = syscall.Close(pidfd)
		return
	}
	f := os.NewFile(uintptr(pidfd), "pidfd")
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

// PID is the process id, which is also its process group id.
func (p *Process) PID() int { return p.pid }

// Started is when the process was started.
func (p *Process) Started() time.Time { return p.start }

// Done is closed once the process has been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait blocks until the process has been reaped and returns how it ended.
func (p *Process) Wait() Exit {
	<-p.done
	return p.exit
}

// Signal sends sig to the whole process group of p. A group that no longer exists is not an error.
func (p *Process) Signal(sig syscall.Signal) error {
	return SignalGroup(p.pid, sig)
}

// SignalGroup sends sig to every process of group pgid (kill(-pgid, sig)). ESRCH (nobody left) is not an error.
func SignalGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		return fmt.Errorf("signal group %d: refusing to signal a group id <= 1", pgid)
	}
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %v to process group %d: %w", sig, pgid, err)
	}
	return nil
}

// Alive reports whether a process with this pid exists (kill(pid, 0) succeeds or fails with EPERM).
func Alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Self is this process's pid; Sweep never signals it.
func self() int { return os.Getpid() }

// ExitWithParent asks the kernel to send sig to this process when its parent exits (PR_SET_PDEATHSIG), so a
// launcher started by a program that is killed (a Ray actor, a notebook) stops its workers instead of running on.
// A parent that already exited (this process was re-parented before the call) is reported as ErrParentGone.
func ExitWithParent(sig syscall.Signal) error {
	parent := os.Getppid()
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(sig), 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_PDEATHSIG): %w", err)
	}
	if os.Getppid() != parent {
		return ErrParentGone
	}
	return nil
}

// ErrParentGone: the process that started this one has already exited.
var ErrParentGone = errors.New("the parent process has already exited")
