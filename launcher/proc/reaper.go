package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER.
const prSetChildSubreaper = 36

// SetSubreaper makes this process the child subreaper of its descendants (prctl PR_SET_CHILD_SUBREAPER): orphans
// below it are reparented to it instead of to PID 1, so it must reap them (see Reaper).
func SetSubreaper() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", errno)
	}
	return nil
}

// Reaper is the one waiter of a process that is PID 1 or a child subreaper: a wait4(-1) loop that hands the exits
// of the processes started through it to their onExit callbacks and reaps every other (orphaned) descendant.
// While a Reaper runs, nothing else in the process may wait for children: exec.Cmd.Wait would race it.
type Reaper struct {
	log     *zap.Logger
	mu      sync.Mutex
	owned   map[int]owned // started through Start, not yet reaped
	orphans int
	listed  bool   // the kernel lists children: held workers can stay zombies while others are reaped
	buf     []byte // for reading children files (the loop's)
	sigchld chan os.Signal
	reaped  chan struct{} // a token after an orphan was reaped (see Reaped)
	stop    chan struct{}
	done    chan struct{}
}

// NewReaper starts the reaping loop. Call Close when no more children will be started.
func NewReaper(log *zap.Logger) *Reaper {
	if log == nil {
		log = zap.NewNop()
	}
	r := &Reaper{log: log, owned: map[int]owned{}, sigchld: make(chan os.Signal, 1), reaped: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), buf: make([]byte, 4096)}
	_, r.listed = children("/proc", self(), &r.buf)
	signal.Notify(r.sigchld, syscall.SIGCHLD)
	go r.loop()
	return r
}

func (r *Reaper) loop() {
	defer close(r.done)
	tick := time.NewTicker(time.Second) // a safety net: SIGCHLD notifications coalesce
	defer tick.Stop()
	for {
		r.reap()
		select {
		case <-r.sigchld:
		case <-tick.C:
		case <-r.stop:
			r.reap()
			return
		}
	}
}

// reap collects every child that has exited by now, except held workers (see StartHeld), whose exit it delivers
// but which it reaps only once released. Holding needs the kernel's list of children (a held zombie would hide
// every other exited child from wait4(-1)); without it every child is reaped at once.
func (r *Reaper) reap() {
	if r.listed && r.reapListed() {
		return
	}
	for r.reapPID(-1) {
	}
}

// reapListed goes through this process's children: an exited held worker has its exit delivered and stays a
// zombie until released; every other exited child is reaped. It reports false when the children cannot be listed.
func (r *Reaper) reapListed() bool {
	kids, ok := children("/proc", self(), &r.buf)
	if !ok {
		return false
	}
	for _, pid := range kids {
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil || info.Signo == 0 {
			continue // running, or not ours to wait for
		}
		r.mu.Lock()
		o, owned := r.owned[pid]
		held := owned && o.p.hold && !closed(o.p.release)
		var code int
		var sig syscall.Signal
		if held && !o.seen {
			// its status is the zombie's own (unreadable: reap it now, unheld)
			if code, sig, held = zombieStatus("/proc", pid, &r.buf); held {
				o.seen = true
				r.owned[pid] = o
				go o.p.setExited(Exit{PID: pid, Code: code, Signal: sig})
			}
		}
		r.mu.Unlock()
		if !held {
			r.reapPID(pid)
		}
	}
	return true
}

// reapPID reaps pid (-1: any child) if it has exited, and delivers its exit or counts an orphan; it reports
// whether a child was reaped. It holds the reaper's lock across the wait, and Signal takes it too, so no signal
// to a worker's group races its pid being freed.
func (r *Reaper) reapPID(pid int) bool {
	r.mu.Lock()
	var ws syscall.WaitStatus
	var ru syscall.Rusage
	got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, &ru)
	for errors.Is(err, syscall.EINTR) {
		got, err = syscall.Wait4(pid, &ws, syscall.WNOHANG, &ru)
	}
	if err != nil || got <= 0 {
		r.mu.Unlock()
		return false // ECHILD: no such child; 0: not exited yet
	}
	o, ok := r.owned[got]
	if ok {
		o.p.mu.Lock()
		o.p.reapedLocked()
		o.p.mu.Unlock()
		delete(r.owned, got)
	} else {
		r.orphans++
	}
	r.mu.Unlock()
	if !ok {
		r.log.Debug("reaped orphan", zap.Int("pid", got), zap.Int("status", int(ws)))
		select {
		case r.reaped <- struct{}{}:
		default: // one pending token says it all: the subtree changed
		}
		return true
	}
	e := Exit{PID: got, Code: ws.ExitStatus()}
	if ws.Signaled() {
		e.Signal, e.Code = ws.Signal(), -1
	}
	e.MaxRSS = ru.Maxrss * 1024
	e.UserCPU = time.Duration(ru.Utime.Nano())
	e.SysCPU = time.Duration(ru.Stime.Nano())
	_ = o.p.cmd.Process.Release() // nobody will Wait: free Go's handle
	go o.p.finish(e)
	return true
}

// reapReleased reaps a released held worker that has exited (one still running is reaped when it exits).
func (r *Reaper) reapReleased(p *Process) {
	r.reapPID(p.pid)
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Start is proc.Start for a process whose exit this reaper delivers: the same process group, Pdeathsig and
// onExit contract, but no cmd.Wait. cmd's Stdout, Stderr and Stdin must be nil or *os.File (no copying
// goroutines, since nobody calls Wait to finish them).
func (r *Reaper) Start(cmd *exec.Cmd, onExit func(*Process)) (*Process, error) {
	return r.start(cmd, onExit, false)
}

func (r *Reaper) start(cmd *exec.Cmd, onExit func(*Process), hold bool) (*Process, error) {
	for _, s := range []any{cmd.Stdin, cmd.Stdout, cmd.Stderr} {
		if _, ok := s.(*os.File); s != nil && !ok {
			return nil, fmt.Errorf("%w: %s: with a reaper the child's stdio must be *os.File, not %T", ErrNotStarted, cmd.Path, s)
		}
	}
	prepare(cmd)
	r.mu.Lock() // held from fork until the pid is registered, so its exit is never taken for an orphan's
	defer r.mu.Unlock()
	p, err := start(cmd, onExit, hold)
	if err != nil {
		return nil, err
	}
	p.rp = r
	r.owned[p.pid] = owned{p: p}
	return p, nil
}

// Reaped has a token whenever an orphaned descendant has been reaped since the last one was taken: a wait for a
// subtree to empty re-checks it then, instead of polling.
func (r *Reaper) Reaped() <-chan struct{} { return r.reaped }

// Orphans is how many processes not started through Start this reaper has reaped.
func (r *Reaper) Orphans() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.orphans
}

// Sweep kills every descendant of this process (SweepTree from this pid) and lets the loop reap them: with the
// reaper on, this process is PID 1 or a child subreaper, so every orphan below it is still in its subtree. It
// kills every child of the process, so one process runs one launch at a time under a reaper. The pids it
// returns exclude the children started through Start (the workers, already killed with their group). A kernel
// without /proc/<pid>/task/<tid>/children gives ErrNoChildrenFile: fall back to Sweep.
func (r *Reaper) Sweep(procRoot string) ([]int, error) {
	return SweepTree(procRoot, self(), func(pid int) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		_, ok := r.owned[pid]
		return ok
	}, 5*time.Second)
}

// Close stops the loop after a last reaping round. Children started through Start that are still running will
// never be delivered: Close only after every one of them is done.
func (r *Reaper) Close() {
	signal.Stop(r.sigchld)
	close(r.stop)
	<-r.done
	if n := r.Orphans(); n > 0 {
		r.log.Info("reaped orphaned processes", zap.Int("count", n))
	}
}

// StartWith starts cmd through rp when rp is not nil, else through the package-level Start (cmd.Wait).
func StartWith(rp *Reaper, cmd *exec.Cmd, onExit func(*Process)) (*Process, error) {
	if rp == nil {
		return Start(cmd, onExit)
	}
	return rp.Start(cmd, onExit)
}

type owned struct {
	p    *Process
	seen bool // a held process whose exit was delivered
}
