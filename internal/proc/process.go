package proc

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotStarted is returned by StartHeld and Reaper.Start when the command could not be started.
var ErrNotStarted = errors.New("process not started")

// Process is one started child that leads its own process group. Its exit is delivered once, by its own goroutine
// or by a Reaper. Signals never reach a process that reused a pid: the leader through its pidfd, the group by
// kill(-pgid) only while the leader is unreaped (running or a zombie, it keeps the group id from reuse). A held
// process stays a zombie after it exits until Release, so its group can be signalled until its teardown is done.
type Process struct {
	cmd   *exec.Cmd
	pid   int
	start time.Time
	hold  bool
	rp    *Reaper // the reaper that reaps it, nil when its own goroutine does

	mu     sync.Mutex // held while signalling and while reaping
	pidfd  int        // -1 when the kernel gave none; closed once reaped
	reaped bool

	exited    chan struct{} // closed once the exit is known (delivered to onExit)
	delivered atomic.Bool   // the exit is being, or has been, delivered: by setExited or by finish
	status    Exit          // how it ended, known at exit (no resource usage while held)
	onExit    func(*Process)
	release   chan struct{}
	released  sync.Once
	done      chan struct{} // closed once reaped
	exit      Exit
}

// StartHeld starts cmd (through rp when rp is not nil) as the leader of a new process group with
// Pdeathsig=SIGKILL, so the child dies when the starting thread (and so the launcher) dies. It is held after it
// exits: onExit is called once it has exited, with Status known, but it stays a zombie, keeping its pid and group id
// reserved, until Release reaps it. Every held process must be released.
func StartHeld(rp *Reaper, cmd *exec.Cmd, onExit func(*Process)) (*Process, error) {
	if rp != nil {
		return rp.start(cmd, onExit, true)
	}
	return startOwn(cmd, onExit, true)
}

// startOwn starts cmd with the OS thread locked, because the kernel ties the parent-death signal to the thread
// that forked, keeps a pidfd of it and waits for it on a goroutine of its own.
func startOwn(cmd *exec.Cmd, onExit func(*Process), hold bool) (*Process, error) {
	prepare(cmd)
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = 2 * time.Second
	}
	pidfd := -1
	cmd.SysProcAttr.PidFD = &pidfd
	runtime.LockOSThread()
	t := time.Now()
	err := cmd.Start()
	runtime.UnlockOSThread()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNotStarted, cmd.Path, err)
	}
	p := newProcess(cmd, cmd.Process.Pid, t, hold, onExit)
	p.pidfd = pidfd
	go p.wait()
	return p, nil
}

// prepare makes cmd the leader of a new process group (of a new session with SysProcAttr.Setsid) that is SIGKILLed
// when the thread starting it dies.
func prepare(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if !cmd.SysProcAttr.Setsid { // setsid made it a group's leader; setpgid would fail for a session leader
		cmd.SysProcAttr.Setpgid = true
		cmd.SysProcAttr.Pgid = 0
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// newProcess is the Process of pid, started at start, without a pidfd yet.
func newProcess(cmd *exec.Cmd, pid int, start time.Time, hold bool, onExit func(*Process)) *Process {
	return &Process{cmd: cmd, pid: pid, start: start, hold: hold, onExit: onExit, pidfd: -1, exited: make(chan struct{}),
		release: make(chan struct{}), done: make(chan struct{})}
}

// wait is the waiting goroutine of a process started without a reaper: it sees the exit without reaping
// (awaitExit, peekExit), delivers it, and reaps at once, or on Release when held.
func (p *Process) wait() {
	awaitExit(p.pidfd)
	code, sig, ok := peekExit(p.pid)
	if p.hold && ok {
		p.setExited(Exit{PID: p.pid, ExitCode: code, Signal: sig})
		<-p.release
	}
	p.mu.Lock()
	err := p.cmd.Wait()
	p.reapedLocked()
	p.mu.Unlock()
	e := Exit{PID: p.pid, ExitCode: -1}
	if st := p.cmd.ProcessState; st != nil {
		ws, _ := st.Sys().(syscall.WaitStatus)
		ru, _ := st.SysUsage().(*syscall.Rusage)
		e = exitOf(p.pid, ws, ru)
	}
	if _, ok := errors.AsType[*exec.ExitError](err); err != nil && !ok {
		e.WaitErr = err
	}
	p.finish(e)
}

// setExited records the exit as seen before reaping and delivers it to onExit, once: the reaper's loop that sees
// a held process exit and a Release that reaps it meanwhile may both try.
func (p *Process) setExited(e Exit) {
	if !p.delivered.CompareAndSwap(false, true) {
		return
	}
	e.Finished = time.Now()
	e.Wall = e.Finished.Sub(p.start)
	p.status = e
	close(p.exited)
	if p.onExit != nil {
		p.onExit(p)
	}
}

// finish records the exit as reaped, with its resource usage, and delivers it unless setExited did (whose time
// it keeps).
func (p *Process) finish(e Exit) {
	if !p.delivered.CompareAndSwap(false, true) {
		<-p.exited
		e.Finished, e.Wall = p.status.Finished, p.status.Wall
		p.exit = e
		close(p.done)
		return
	}
	e.Finished = time.Now()
	e.Wall = e.Finished.Sub(p.start)
	p.exit, p.status = e, e
	close(p.done)
	close(p.exited)
	if p.onExit != nil {
		p.onExit(p)
	}
}

// exitOf is how pid ended from its wait status and resource usage (nil: unknown).
func exitOf(pid int, ws syscall.WaitStatus, ru *syscall.Rusage) Exit {
	e := Exit{PID: pid, ExitCode: ws.ExitStatus()}
	if ws.Signaled() {
		e.Signal, e.ExitCode = ws.Signal(), -1
	}
	if ru != nil {
		e.MaxRSS = ru.Maxrss * 1024
		e.UserCPU = time.Duration(ru.Utime.Nano())
		e.SysCPU = time.Duration(ru.Stime.Nano())
	}
	return e
}

// reapedLocked marks p reaped (p.mu held): its pid may be reused from now on, so its group is never signalled
// again and its pidfd is closed.
func (p *Process) reapedLocked() {
	p.reaped = true
	if p.pidfd >= 0 {
		_ = syscall.Close(p.pidfd)
		p.pidfd = -1
	}
}

// PID is the process id, which is also its process group id.
func (p *Process) PID() int { return p.pid }

// Wait blocks until the process has been reaped and returns how it ended. A held process is reaped only once
// released: call Release, or Status to learn how it ended before that.
func (p *Process) Wait() Exit {
	<-p.done
	return p.exit
}

// Status blocks until the process has exited and returns how it ended; while it is held, without its resource
// usage (see Release).
func (p *Process) Status() Exit {
	<-p.exited
	return p.status
}

// Release lets a held process be reaped and returns Wait's Exit. For a process that is not held it is Wait.
func (p *Process) Release() Exit {
	p.released.Do(func() {
		close(p.release)
		if p.rp != nil {
			p.rp.reapPID(p.pid) // if it has exited; else when it does
		}
	})
	return p.Wait()
}

// Signal sends sig once to the leader's process group (kill(-pgid)) while the leader is unreaped, and to a leader
// that has left its group through its pidfd. No process gets sig twice (a second SIGTERM is "force quit now" to
// many programs). Once the leader is reaped nothing is signalled: what is left is the sweep's. A process that no
// longer exists is not an error.
func (p *Process) Signal(sig syscall.Signal) error {
	if p.rp != nil { // the reaper reaps under its lock (with wait4(-1) it cannot take p.mu first)
		p.rp.mu.Lock()
		defer p.rp.mu.Unlock()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return nil
	}
	if p.leads() {
		err := SignalGroup(p.pid, sig)
		if p.leads() || err != nil {
			return err
		}
		// it left its group just now, maybe before the group signal: it gets it (at most once more) below
	}
	var errs []error
	if p.pidfd >= 0 {
		if err := unix.PidfdSendSignal(p.pidfd, sig, nil, 0); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("signal %v to pid %d: %w", sig, p.pid, err))
		}
	}
	if err := SignalGroup(p.pid, sig); err != nil { // what is left of its group
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// leads reports whether the (unreaped) leader is still in the process group it was started in; a leader whose
// group cannot be read counts as having left it, so that the pidfd reaches it.
func (p *Process) leads() bool {
	pgid, err := syscall.Getpgid(p.pid)
	return err == nil && pgid == p.pid
}

// Exited reports whether the process has exited, its exit delivered or not yet (waitid WNOWAIT, which never
// reaps): exits are delivered one by one, so one may be known here before it is delivered.
func (p *Process) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
	}
	if p.rp != nil { // the reaper reaps under its lock (see Signal)
		p.rp.mu.Lock()
		defer p.rp.mu.Unlock()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return true
	}
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err != nil || info.Signo != 0
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
