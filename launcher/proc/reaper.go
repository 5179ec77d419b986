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
	sigchld chan os.Signal
	stop    chan struct{}
	done    chan struct{}
}

// NewReaper starts the reaping loop. Call Close when no more children will be started.
func NewReaper(log *zap.Logger) *Reaper {
	if log == nil {
		log = zap.NewNop()
	}
	r := &Reaper{log: log, owned: map[int]owned{}, sigchld: make(chan os.Signal, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
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

// reap collects every child that has exited by now.
func (r *Reaper) reap() {
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, &ru)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return // ECHILD: no children; 0: none exited yet
		}
		r.mu.Lock() // Start holds mu from fork to registration, so an owned pid is always registered here
		o, ok := r.owned[pid]
		delete(r.owned, pid)
		if !ok {
			r.orphans++
		}
		r.mu.Unlock()
		if !ok {
			r.log.Debug("reaped orphan", zap.Int("pid", pid), zap.Int("status", int(ws)))
			continue
		}
		e := Exit{PID: pid, Finished: time.Now(), Code: ws.ExitStatus()}
		e.Wall = e.Finished.Sub(o.p.start)
		if ws.Signaled() {
			e.Signal, e.Code = ws.Signal(), -1
		}
		e.MaxRSS = ru.Maxrss * 1024
		e.UserCPU = time.Duration(ru.Utime.Nano())
		e.SysCPU = time.Duration(ru.Stime.Nano())
		go o.p.deliver(e, o.onExit)
	}
}

// Start is proc.Start for a process whose exit this reaper delivers: the same process group, Pdeathsig and
// onExit contract, but no cmd.Wait. cmd's Stdout, Stderr and Stdin must be nil or *os.File (no copying
// goroutines, since nobody calls Wait to finish them).
func (r *Reaper) Start(cmd *exec.Cmd, onExit func(*Process)) (*Process, error) {
	for _, s := range []any{cmd.Stdin, cmd.Stdout, cmd.Stderr} {
		if _, ok := s.(*os.File); s != nil && !ok {
			return nil, fmt.Errorf("%w: %s: with a reaper the child's stdio must be *os.File, not %T", ErrNotStarted, cmd.Path, s)
		}
	}
	prepare(cmd)
	r.mu.Lock() // held from fork until the pid is registered, so its exit is never taken for an orphan's
	defer r.mu.Unlock()
	p, err := start(cmd)
	if err != nil {
		return nil, err
	}
	r.owned[p.pid] = owned{p: p, onExit: onExit}
	return p, nil
}

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
	p      *Process
	onExit func(*Process)
}

// deliver records the exit the reaper collected, like wait does for cmd.Wait.
func (p *Process) deliver(e Exit, onExit func(*Process)) {
	p.exit = e
	_ = p.cmd.Process.Release() // nobody will Wait: free the pidfd
	close(p.done)
	if onExit != nil {
		onExit(p)
	}
}
