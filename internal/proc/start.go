package proc

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// starter is a goroutine locked to its OS thread for its owner's life: the thread that starts a Reaper's processes,
// or a Stopper's. The kernel ties Pdeathsig to the thread that forked: when the Reaper closes, the goroutine returns
// still locked, the thread ends, and any child still running gets its SIGKILL. It is never the process's first
// thread, the one orphans are re-parented to (see Reaper.leaderChildren).
type starter struct {
	reqs   chan func()
	quit   chan struct{}
	closer sync.Once
	done   chan struct{} // closed once the thread serves no more
	tid    int           // the thread's id, set before the first request
}

func newStarter() *starter {
	s := &starter{reqs: make(chan func()), quit: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan struct{})
	go s.thread(ready)
	<-ready // tid is set
	return s
}

// thread locks the goroutine to its thread and serves the starts; a goroutine that finds itself on the first
// thread hands over to a new one, which cannot land there while this one holds it.
func (s *starter) thread(ready chan<- struct{}) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		moved := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(moved)
			s.serve(ready)
		}()
		<-moved
		runtime.UnlockOSThread()
		return
	}
	s.serve(ready)
}

// serve sets tid, closes ready and runs each request on the locked thread until the starter is closed; it
// returns without unlocking.
func (s *starter) serve(ready chan<- struct{}) {
	defer close(s.done)
	s.tid = unix.Gettid()
	close(ready)
	for {
		select {
		case f := <-s.reqs:
			f()
		case <-s.quit:
			return
		}
	}
}

// run runs f on the starter's thread and returns once it has: at once where the caller is on that thread already
// (within Starting). It reports false, f not run, once the starter is closed.
func (s *starter) run(f func()) bool {
	if unix.Gettid() == s.tid {
		f()
		return true
	}
	done := make(chan struct{})
	select {
	case s.reqs <- func() { f(); close(done) }:
		<-done
		return true
	case <-s.done:
		return false
	}
}

// close ends the thread once the request it runs, if any, is done.
func (s *starter) close() {
	s.closer.Do(func() { close(s.quit) })
	<-s.done
}

// Start starts cmd as the leader of a new process group with Pdeathsig=SIGKILL; this reaper delivers its exit
// to onExit, on the reaper's goroutine (it must not block). cmd.Process is released at once: the *Process is the
// handle. cmd's stdio must be nil (/dev/null) or *os.File, since nobody calls Wait to end copying goroutines. An
// error wraps ErrNotStarted and what exec.Cmd.Start returned (an *os.PathError wrapping ENOENT, E2BIG, EAGAIN, ...).
func (r *Reaper) Start(cmd *exec.Cmd, onExit func(*Process)) (*Process, error) {
	return r.start(cmd, onExit, false)
}

// start starts cmd on the starter's thread and registers it before any reaping round can run (forkMu): a child
// that exits at once is never taken for an orphan. It then puts the child under watch.
func (r *Reaper) start(cmd *exec.Cmd, onExit func(*Process), hold bool) (*Process, error) {
	if err := fileStdio(cmd); err != nil {
		return nil, err
	}
	prepare(cmd)
	var p *Process
	var err error
	ran := r.starter.run(func() {
		r.forkMu.RLock()
		defer r.forkMu.RUnlock()
		t := time.Now()
		if err = cmd.Start(); err != nil {
			return
		}
		p = r.own(cmd, cmd.Process.Pid, t, hold, onExit)
	})
	if !ran {
		return nil, fmt.Errorf("%w: %s: the reaper is closed", ErrNotStarted, cmd.Path)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNotStarted, cmd.Path, err)
	}
	_ = cmd.Process.Release() // nobody will Wait: the reaper opens a pidfd of its own (watch)
	r.watch(p)
	return p, nil
}

// Starting runs f on the thread that starts this reaper's processes: the starts f makes through the reaper run
// there without a hand-over to that thread and back for each. Other starts wait until f returns. After Close f
// runs on the caller's goroutine.
func (r *Reaper) Starting(f func()) {
	if !r.starter.run(f) {
		f()
	}
}

// fileStdio refuses stdio that exec.Cmd would copy with goroutines that only Wait ends.
func fileStdio(cmd *exec.Cmd) error {
	for _, s := range []any{cmd.Stdin, cmd.Stdout, cmd.Stderr} {
		if _, ok := s.(*os.File); s != nil && !ok {
			return fmt.Errorf("%w: %s: with a reaper the child's stdio must be *os.File, not %T", ErrNotStarted, cmd.Path, s)
		}
	}
	return nil
}

// own registers the Process of pid, just forked (forkMu held), until watch puts it under watch.
func (r *Reaper) own(cmd *exec.Cmd, pid int, start time.Time, hold bool, onExit func(*Process)) *Process {
	p := newProcess(cmd, pid, start, hold, onExit)
	p.rp = r
	r.mu.Lock()
	defer r.mu.Unlock()
	r.owned[pid] = owned{p: p, watch: watchPending}
	return p
}

// watch puts a process just registered (own) under watch: its pidfd in the epoll set, whose event waits for the
// lock held here, else (no pidfd: old kernels, the group is signalled by pid) the SIGCHLD loop's listing. One reaped
// meanwhile by the loop's wait4(-1) (it could not list the children) is done and not watched: the pid may be
// another's by now.
func (r *Reaper) watch(p *Process) {
	fd, err := pidfdOpen(p.pid, 0)
	r.mu.Lock()
	o, ok := r.owned[p.pid]
	if !ok || o.p != p {
		r.mu.Unlock()
		if err == nil {
			_ = unix.Close(fd)
		}
		return
	}
	o.watch = watchListed
	if err == nil {
		p.mu.Lock()
		p.pidfd = fd
		p.mu.Unlock()
		if r.exits != nil && r.exits.ctl(unix.EPOLL_CTL_ADD, fd, p.pid) == nil {
			o.watch = watchPolled
		}
	}
	r.owned[p.pid] = o
	if o.watch == watchPolled {
		r.mu.Unlock()
		return
	}
	r.listing++
	r.mu.Unlock()
	select { // it may have exited already: let the loop list the children now
	case r.sigchld <- syscall.SIGCHLD:
	default:
	}
}
