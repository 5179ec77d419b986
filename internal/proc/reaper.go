package proc

import (
	"errors"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Reaper is the one waiter of a process that is PID 1 or a child subreaper. It starts its processes from one
// thread of its own (see starter), learns each exit from a pidfd in one epoll set, hands it to onExit, and on
// SIGCHLD reaps every orphaned descendant; without pidfds it lists its children on each SIGCHLD. While it runs,
// nothing else in the process may wait for children: exec.Cmd.Wait would race it.
type Reaper struct {
	log     *zap.Logger
	mu      sync.Mutex
	owned   map[int]owned // started through Start, not yet reaped
	listing int           // how many of owned have no pidfd in the epoll set: their exits are found by listing
	orphans int
	listed  bool   // the kernel lists children: held workers can stay zombies while others are reaped
	buf     []byte // for reading children files (the loop's)
	exits   *exitPoll
	sigchld chan os.Signal
	reaped  chan struct{} // a token after an orphan was reaped (see Reaped)
	stop    chan struct{}
	done    chan struct{}

	// forkMu is held for reading from a fork until the child is registered in owned, and for writing while orphans
	// are reaped: a child between its fork and its registration is never taken for an orphan.
	forkMu  sync.RWMutex
	starter *starter // closed by Close: a start is refused then
}

// watch is how the reaper learns the exit of a process started through it.
type watch uint8

const (
	watchPending watch = iota // just forked, its pidfd not in the epoll set yet: nothing touches it until it is
	watchPolled               // its pidfd is in the epoll set: its exit is one event
	watchListed               // no pidfd: the SIGCHLD loop finds its exit by listing the children
)

// NewReaper starts the reaping loop. Call Close when no more children will be started.
func NewReaper(log *zap.Logger) *Reaper {
	if log == nil {
		log = zap.NewNop()
	}
	r := &Reaper{log: log, owned: map[int]owned{}, sigchld: make(chan os.Signal, 1), reaped: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), buf: make([]byte, 4096)}
	r.listed = childrenListed("/proc", os.Getpid()) == nil
	if e, err := newExitPoll(); err == nil {
		r.exits = e
		go r.pollExits()
	} else {
		log.Debug("no epoll set for pidfds: exits are found by listing the children", zap.Error(err))
	}
	r.starter = newStarter()
	signal.Notify(r.sigchld, syscall.SIGCHLD)
	go r.loop()
	return r
}

func (r *Reaper) loop() {
	defer close(r.done)
	tick := time.NewTicker(time.Second) // a safety net: SIGCHLD notifications coalesce
	defer tick.Stop()
	for {
		r.reap(false)
		select {
		case <-r.sigchld:
		case <-tick.C:
			r.reap(true)
		case <-r.stop:
			r.reap(true)
			return
		}
	}
}

// reap collects every exited orphan and delivers or reaps the owned processes without a pidfd. full lists the
// children of every thread, not only the one orphans go to. No fork is under way meanwhile (forkMu): every
// unregistered child is an orphan.
func (r *Reaper) reap(full bool) {
	r.forkMu.Lock()
	defer r.forkMu.Unlock()
	r.mu.Lock()
	listing := r.listing
	r.mu.Unlock()
	switch {
	case listing > 0: // without an epoll set too: every owned process is listed
		r.reapAll()
	case r.reapOrphans() && r.listed: // an owned zombie hides the other exited children: list them
		kids := r.leaderChildren()
		if full {
			kids, _ = children("/proc", os.Getpid(), &r.buf)
		}
		for _, pid := range kids {
			r.reapOrphan(pid)
		}
	}
}

// reapAll reaps every exited child, but delivers the exit of a held one and reaps it only once released. Holding
// needs the kernel's list of children (a held zombie would hide every other exited child from wait4(-1)); without
// it every child is reaped at once.
func (r *Reaper) reapAll() {
	if r.listed && r.reapListed() {
		return
	}
	for r.reapPID(-1) {
	}
}

// reapListed goes through this process's children: an exited held worker has its exit delivered and stays a
// zombie until released; every other exited child is reaped. It reports false when the children cannot be listed.
func (r *Reaper) reapListed() bool {
	kids, ok := children("/proc", os.Getpid(), &r.buf)
	if !ok {
		return false
	}
	for _, pid := range kids {
		var info unix.Siginfo
		if err := waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT); err != nil || info.Signo == 0 {
			continue // running, or not ours to wait for
		}
		r.mu.Lock()
		switch o, owned := r.owned[pid]; {
		case !owned:
			r.mu.Unlock()
			r.reapPID(pid)
		case o.watch == watchPending:
			r.mu.Unlock() // its starter is still setting it up
		default:
			r.exitSeen(pid, o, &info)
		}
	}
	return true
}

// exitSeen takes the exit of owned process o, with r.mu held, which it releases: a held process not yet released
// has its exit delivered (once: setExited) and stays a zombie; any other is reaped.
func (r *Reaper) exitSeen(pid int, o owned, info *unix.Siginfo) {
	r.mu.Unlock()
	if !o.p.hold || closed(o.p.release) {
		r.reapPID(pid)
		return
	}
	_, code, sig := childExit(info)
	o.p.setExited(Exit{PID: pid, ExitCode: code, Signal: sig})
}

// polled takes the event of one owned process's pidfd: its exit is delivered (held) or reaped.
func (r *Reaper) polled(pid int) {
	r.mu.Lock()
	o, ok := r.owned[pid]
	if !ok || o.watch != watchPolled {
		r.mu.Unlock()
		return
	}
	var info unix.Siginfo
	err := waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT)
	for errors.Is(err, syscall.EINTR) {
		err = waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT)
	}
	if err != nil || info.Signo == 0 { // not exited (or unreadable): watch again, or leave it to the listing
		if err != nil || r.exits.ctl(unix.EPOLL_CTL_MOD, o.p.pidfd, pid) != nil {
			o.watch = watchListed
			r.owned[pid] = o
			r.listing++
		}
		r.mu.Unlock()
		return
	}
	r.exitSeen(pid, o, &info)
}

// reapPID reaps pid (-1: any child) if it has exited, and delivers its exit or counts an orphan; it reports
// whether a child was reaped. It holds the reaper's lock across the wait, as Signal does, so no signal to a
// worker's group races its pid being freed.
func (r *Reaper) reapPID(pid int) bool {
	r.mu.Lock()
	if o, ok := r.owned[pid]; ok && o.watch == watchPending {
		r.mu.Unlock()
		return false
	}
	var ws syscall.WaitStatus
	var ru syscall.Rusage
	got, err := wait4(pid, &ws, syscall.WNOHANG, &ru)
	for errors.Is(err, syscall.EINTR) {
		got, err = wait4(pid, &ws, syscall.WNOHANG, &ru)
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
		if o.watch == watchListed {
			r.listing--
		}
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
	o.p.finish(exitOf(got, ws, &ru))
	return true
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
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

// Close stops the loop after a last reaping round; call it once every child started through it is done. Ending
// the starter's thread sends any child still running its Pdeathsig (SIGKILL).
func (r *Reaper) Close() {
	signal.Stop(r.sigchld)
	close(r.stop)
	<-r.done
	if r.exits != nil {
		r.exits.close(r)
	}
	r.starter.close()
	if n := r.Orphans(); n > 0 {
		r.log.Info("reaped orphaned processes", zap.Int("count", n))
	}
}

type owned struct {
	p     *Process
	keep  bool // left alive by Sweep (see Keep)
	watch watch
}

// The system calls the reaper waits with: variables for the tests.
var (
	waitid = func(idType, id int, info *unix.Siginfo, options int) error {
		return unix.Waitid(idType, id, info, options, nil)
	}
	wait4     = syscall.Wait4
	pidfdOpen = unix.PidfdOpen
)
