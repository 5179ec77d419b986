package attempt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/proc"
)

// Controller is the one stop controller of a run (docs/CONTROL.md): its goroutine is the only reader of the
// run's signals, of its timers (--timeout, the grace period) and of every other reason to stop — a console write
// error, the caller's context, a cause another goroutine reports (a failing rank, another node, the rendezvous
// store) — in every phase of the run. It drives the attached attempt (a supervisor: exits, stops, escalation) and
// cancels the contexts of every other wait (join, barrier, the exchange of outcomes, between generations).
type Controller struct {
	log      *zap.Logger
	timeout  time.Duration
	procRoot string           // where the process group's orphaned state is read
	ctx      context.Context  // the caller's
	sigs     <-chan os.Signal // Spec.Signals, coalesced
	outErr   <-chan error     // the first write error of tpurun's stdout or stderr
	msgs     chan func()      // work for the loop, from other goroutines
	quit     chan struct{}
	done     chan struct{}

	// owned by the loop goroutine
	seen     map[syscall.Signal]bool // stop signals received so far
	att      *supervisor             // the attempt being supervised, nil between attempts
	pending  *Cause                  // a cause for this generation's attempt that came before it was attached
	timeoutC <-chan time.Time
	timer    *time.Timer
	consoles []*console.Console

	mu      sync.Mutex
	first   *Cause // the first job-wide cause
	last    *Cause // the latest job-wide cause
	seq     int    // how many job-wide causes came so far
	hurried bool   // a second stop came: nothing waits any more
	jobCtx  context.Context
	cancel  context.CancelCauseFunc
	waiters map[*context.CancelCauseFunc]struct{}
}

// stopped is the cause a context of the controller is canceled with.
type stopped struct{ c *Cause }

func (e *stopped) Error() string { return "stopping: " + e.c.String() }

// StopOf is the controller's cause behind a canceled context, nil when it was not the controller.
func StopOf(ctx context.Context) *Cause {
	var s *stopped
	if errors.As(context.Cause(ctx), &s) {
		return s.c
	}
	return nil
}

// NewController starts the controller of a run: its timeout counts from now.
func NewController(ctx context.Context, log *zap.Logger, timeout time.Duration, procRoot string, sigs <-chan os.Signal, outErr <-chan error,
	consoles []*console.Console) *Controller {
	c := &Controller{log: log, timeout: timeout, procRoot: procRoot, ctx: ctx, sigs: sigs, outErr: outErr,
		msgs: make(chan func()), quit: make(chan struct{}), done: make(chan struct{}), seen: map[syscall.Signal]bool{},
		consoles: consoles, waiters: map[*context.CancelCauseFunc]struct{}{}}
	c.jobCtx, c.cancel = context.WithCancelCause(context.Background())
	if timeout > 0 {
		c.timer = time.NewTimer(timeout)
		c.timeoutC = c.timer.C
	}
	go c.loop()
	return c
}

// Close ends the loop; nothing is supervised any more.
func (c *Controller) Close() {
	close(c.quit)
	<-c.done
	if c.timer != nil {
		c.timer.Stop()
	}
	c.cancel(nil)
}

func (c *Controller) loop() {
	defer close(c.done)
	ctxDone := c.ctx.Done()
	for {
		var s supervisorChans
		if c.att != nil {
			s = c.att.chans()
		}
		select {
		case sig := <-c.sigs:
			c.onSignal(sig)
		case err := <-c.outErr:
			c.outErr = nil
			c.onCause(ErrCause(StopOutput, err))
		case <-c.timeoutC:
			c.timeoutC = nil
			c.onTimeout()
		case <-ctxDone:
			ctxDone = nil
			c.onCause(ErrCause(StopCanceled, c.ctx.Err()))
		case f := <-c.msgs:
			f()
		case m := <-s.exits:
			c.att.exited(m)
		case <-s.grace:
			c.att.graceExpired()
		case <-s.watch:
			c.att.checkOrphans()
		case <-s.poll:
			c.att.checkOrphans()
		case <-c.quit:
			return
		}
	}
}

// do runs f on the loop goroutine and returns once the loop has taken it.
func (c *Controller) do(f func()) {
	select {
	case c.msgs <- f:
	case <-c.done:
	}
}

// Stop reports a cause to stop from any goroutine: a failure of another node, a lost node, the rendezvous store
// gone, the job closed.
func (c *Controller) Stop(x *Cause) { c.do(func() { c.onCause(x) }) }

// JobContext is canceled by the first job-wide cause: the join, the barrier and the decision to restart use it,
// so a stopping job starts nothing new.
func (c *Controller) JobContext() context.Context { return c.jobCtx }

// JobCause is the first job-wide cause, nil while none.
func (c *Controller) JobCause() *Cause {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first
}

// StopSeq counts the job-wide causes so far: a wait made later with waitContext(parent, since) ends at once when a
// cause came after since (after the attempt before it ended, say).
func (c *Controller) StopSeq() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}

// WaitContext is parent, also canceled by any job-wide cause after the since'th (stopSeq), whether it came before
// the wait began or while it lasts, and at once after a second stop: a node that waits for the others' outcome
// after its own stop still waits, but not past the next signal, timeout or lost store.
func (c *Controller) WaitContext(parent context.Context, since int) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	c.mu.Lock()
	if c.seq > since || c.hurried {
		cancel(&stopped{c.last})
	}
	c.waiters[&cancel] = struct{}{}
	c.mu.Unlock()
	return ctx, func() {
		c.mu.Lock()
		delete(c.waiters, &cancel)
		c.mu.Unlock()
		cancel(nil)
	}
}

// onCause takes one cause: a job-wide one is recorded (the first one ends the job) and ends every wait; any cause
// goes to the attempt being supervised, or waits for this generation's attempt.
func (c *Controller) onCause(x *Cause) {
	if x.Reason.JobWide() {
		c.mu.Lock()
		if c.first == nil {
			c.first = x
			c.cancel(&stopped{x})
		}
		c.seq++
		c.last = x
		for w := range c.waiters {
			(*w)(&stopped{x})
		}
		c.mu.Unlock()
	}
	switch {
	case c.att != nil:
		c.att.feed(Event{Kind: EvStop, Cause: x})
	case x.Reason.JobWide():
		c.log.Warn(x.String() + ": stopping the run")
	case c.pending == nil:
		c.pending = x
	}
}

// BeginGeneration forgets the causes that were for the last generation's attempt.
func (c *Controller) BeginGeneration() { c.do(func() { c.pending = nil }) }

// attach makes s the supervised attempt; a cause that came before it applies at once.
func (c *Controller) attach(s *supervisor) {
	c.do(func() {
		c.att = s
		if x := c.JobCause(); x != nil {
			s.feed(Event{Kind: EvStop, Cause: x})
		} else if c.pending != nil {
			s.feed(Event{Kind: EvStop, Cause: c.pending})
		}
	})
}

// detach ends the supervision of s (from the loop, when its machine is done).
func (c *Controller) detach(s *supervisor) {
	if c.att == s {
		c.att = nil
	}
}

// onSignal applies the signal policy (signals.go) to one signal tpurun received.
func (c *Controller) onSignal(sig os.Signal) {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return
	}
	switch policyOf(s) {
	case policyStop:
		c.onStopSignal(s)
	case policyJobStop:
		c.onJobStop(s)
	case policyContinue:
		c.onContinue()
	case policyForward:
		if s == syscall.SIGWINCH && c.att != nil && c.att.resizeTerminals() {
			return
		}
		if c.att == nil {
			c.log.Info("no worker to forward "+proc.SignalName(s)+" to: between attempts", zap.String("signal", proc.SignalName(s)))
			return
		}
		c.att.feed(Event{Kind: EvForward, Signal: s})
	}
}

// onStopSignal: the first stop signal stops the run; the same one again, or any once the attempt's grace has
// begun, is a second stop: SIGKILL now, and no more waiting for a reader of the output or for the other nodes.
func (c *Controller) onStopSignal(s syscall.Signal) {
	second := c.seen[s] || (c.att != nil && c.att.m.GraceBegan())
	c.seen[s] = true
	for _, con := range c.consoles {
		con.Stopped(s) // output dropped from now on was lost to s
	}
	if !second {
		c.onCause(SignalCause(s))
		if c.att == nil || c.att.m.Phase() >= Sweeping {
			// No worker runs (before the first attempt, between two, once every worker of this one has exited, or at
			// the end of the run): nothing is left to stop gently, only readers of the output to wait for, and that
			// wait is now bounded (after Run returns, HurryOnStop does the same).
			c.hurry()
		}
		return
	}
	c.log.Warn("second stop signal "+proc.SignalName(s)+": SIGKILL to every worker group now; not waiting for a reader of the output or for the other nodes",
		zap.String("signal", proc.SignalName(s)))
	c.mu.Lock()
	c.hurried = true
	c.mu.Unlock()
	c.onCause(SignalCause(s)) // recorded if it is the first job-wide cause, and every wait ends
	if c.att != nil {
		c.att.feed(Event{Kind: EvSecondStop, Signal: s, Why: "second " + proc.SignalName(s)})
	}
	c.hurry()
}

// onTimeout: --timeout stops the run; when the attempt's grace has already begun (it stops for another cause),
// the timeout bounds it too: SIGKILL now.
func (c *Controller) onTimeout() {
	why := "--timeout " + c.timeout.String() + " expired"
	escalate := c.att != nil && c.att.m.GraceBegan()
	c.onCause(ErrCause(StopTimeout, fmt.Errorf("%w: %s", failure.ErrTimeout, why)))
	if escalate {
		c.att.feed(Event{Kind: EvSecondStop, Why: why})
	}
}

// hurryWrite is how long one write to the launcher's stdout or stderr may wait for its reader after a second stop
// signal; then the rest of the output is discarded.
const hurryWrite = time.Second

func (c *Controller) hurry() {
	for _, con := range c.consoles {
		con.Hurry(hurryWrite)
	}
}

func (c *Controller) abandon() {
	for _, con := range c.consoles {
		con.Abandon()
	}
}

// onJobStop: SIGTSTP (Ctrl-Z at tpurun's terminal), SIGTTIN or SIGTTOU stop every worker group, then tpurun
// itself, as a shell's job stops.
func (c *Controller) onJobStop(s syscall.Signal) {
	if c.cannotBeResumed(s) {
		return
	}
	if c.att != nil {
		c.att.jobStop(s)
		c.att.waitStopped(c.procRoot, jobStopWait) // the workers first, as a shell's job stops: tpurun last
	}
	c.stopSelf(s)
}

// jobStopWait bounds how long a job-control stop waits for the workers to stop before tpurun stops itself: a worker
// that takes the signal (a handler, a blocked signal taken later) may never stop, and the shell waits for tpurun.
const jobStopWait = 5 * time.Second

// cannotBeResumed reports (and logs) that a job-control stop by s is discarded because tpurun's process group is
// orphaned: it leads its own session (setsid, a terminal of its own) or the shell that started it has exited, so
// nothing would ever send the SIGCONT; stopped, tpurun and its workers would wait forever. The kernel discards
// SIGTSTP, SIGTTIN and SIGTTOU for such a group for that reason; tpurun does the same for its workers' groups. As
// PID 1 (never stopped itself, as with tini and dumb-init) the workers are stopped all the same.
func (c *Controller) cannotBeResumed(s syscall.Signal) bool {
	if os.Getpid() == 1 || !proc.GroupOrphaned(c.procRoot, syscall.Getpgrp()) {
		return false
	}
	c.log.Warn("job control: " + proc.SignalName(s) + " ignored: tpurun's process group is orphaned (it leads its session, " +
		"or the shell that started it has exited), so nothing could resume the job; as the kernel does for an orphaned " +
		"group, the workers go on. Run tpurun from a shell with job control to stop and resume it (Ctrl-Z, fg)")
	return true
}

// stopSelf stops tpurun as a job-control stop, so that the shell that started it sees it stopped; as PID 1 it does
// not stop itself (the kernel would ignore it): the workers then stay stopped until SIGCONT. The shell can die
// between cannotBeResumed's look and the stop: the kernel then discards the stop (proc.StopSelf), and the workers
// stopped for it are resumed here, since nothing else could resume them.
func (c *Controller) stopSelf(s syscall.Signal) {
	if os.Getpid() == 1 {
		c.log.Warn("job control: " + proc.SignalName(s) + " stopped the workers; as PID 1 tpurun cannot stop itself: SIGCONT resumes them")
		return
	}
	c.log.Info("job control: " + proc.SignalName(s) + " stopped the workers; stopping tpurun; SIGCONT resumes every worker")
	parentGone, err := proc.StopSelf()
	switch {
	case err != nil:
		c.log.Warn("job control: tpurun could not stop itself; resuming the workers", zap.Error(err))
		c.onContinue()
	case parentGone || proc.GroupOrphaned(c.procRoot, syscall.Getpgrp()):
		// The shell is gone: the job is hung up as the kernel hangs up a stopped group that loses its shell
		// (SIGHUP, then SIGCONT), whether the kernel's own SIGHUP reached tpurun or the stop raced the shell's exit.
		c.log.Warn("job control: the shell that started tpurun exited while the job stopped; SIGHUP and SIGCONT to every worker, " +
			"as the kernel does for a stopped job that loses its shell")
		if c.att != nil {
			c.att.signalAll(syscall.SIGHUP, 0)
		}
		c.onContinue()
	}
}

// onContinue resumes every worker group.
func (c *Controller) onContinue() {
	if c.att == nil {
		return
	}
	c.att.signalAll(syscall.SIGCONT, 0)
}
