package stop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
	"tpurun/internal/console"
	"tpurun/internal/failure"

	"go.uber.org/zap"
)

// Controller is the one stop controller of a run (docs/CONTROL.md): its goroutine is the only reader of the run's
// signals, timers and every other reason to stop (a console write error, the caller's context, a cause another
// goroutine reports), in every phase of the run. It drives the attached attempt and cancels the contexts of every
// other wait (join, barrier, the exchange of outcomes).
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
	att      Attempt                 // the attempt being supervised, nil between attempts
	pending  *Cause                  // a cause for this generation's attempt that came before it was attached
	timeoutC <-chan time.Time
	timer    *time.Timer
	consoles []*console.Console
	job      jobControl // job control: SIGTSTP, SIGTTIN, SIGTTOU and SIGCONT

	mu       sync.Mutex
	last     *Cause          // the latest job-wide cause
	seq      int             // how many job-wide causes came so far
	hurried  bool            // a second stop came: nothing waits any more
	jobCtx   context.Context // canceled by the first job-wide cause
	cancel   context.CancelCauseFunc
	waits    context.Context // canceled by the next job-wide cause, then made anew (see WaitContext)
	endWaits context.CancelCauseFunc
}

// Attempt is what the controller drives while one attempt of this node's workers runs (internal/attempt's
// supervisor): attached with Attach, detached with Detach, and called only on the controller's goroutine.
type Attempt interface {
	// Wakeups are the channels the loop waits on for the attempt now.
	Wakeups() Wakeups
	// GraceExpired: the grace period of Wakeups.Grace is over.
	GraceExpired()
	// CheckOrphans: a look at what the workers left (Wakeups.Orphans or Wakeups.Poll).
	CheckOrphans()

	// Stop begins to stop the attempt for x, unless it already stops (the first cause decides its verdict).
	Stop(x *Cause)
	// Forward passes a signal of the forward policy to every worker group.
	Forward(sig syscall.Signal)
	// SecondStop kills at once: the stop signal sig came again (0: the timeout expired while the grace ran); why
	// says so in words ("second SIGTERM").
	SecondStop(sig syscall.Signal, why string)
	// GraceBegan reports whether the attempt has begun to stop: a stop signal now is a second stop.
	GraceBegan() bool

	// Signal sends sig to every worker group as a shell's job control does: a stop signal (SIGTSTP, SIGTTIN,
	// SIGTTOU) stops them, SIGCONT resumes them and gives their terminals the window size of now.
	Signal(sig syscall.Signal)
	// Unstopped are the ranks of the workers neither stopped nor gone (procRoot's /proc).
	Unstopped(procRoot string) []int
	// StopForegroundJobs stops what runs in the foreground of each worker's terminal, once the workers are stopped.
	StopForegroundJobs()
}

// Wakeups are the channels of the attached attempt that the loop selects on; a nil one blocks forever.
type Wakeups struct {
	Exits   <-chan func()    // a worker exited: the call that takes its exit, made on the loop
	Grace   <-chan time.Time // the grace period expired (Attempt.GraceExpired)
	Orphans <-chan struct{}  // the reaper reaped a process while the attempt sweeps (Attempt.CheckOrphans)
	Poll    <-chan time.Time // a look at the orphans without a reaper to tell (Attempt.CheckOrphans)
}

// stopped is the cause a context of the controller is canceled with.
type stopped struct{ c *Cause }

func (e *stopped) Error() string { return "stopping: " + e.c.String() }

// CauseOf is the controller's cause behind a canceled context, nil when it was not the controller.
func CauseOf(ctx context.Context) *Cause {
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
		consoles: consoles}
	c.jobCtx, c.cancel = context.WithCancelCause(context.Background())
	c.waits, c.endWaits = context.WithCancelCause(context.Background())
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
	c.closeJob()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.cancel(nil)
}

func (c *Controller) loop() {
	defer close(c.done)
	ctxDone := c.ctx.Done()
	for {
		var w Wakeups
		if c.att != nil {
			w = c.att.Wakeups()
		}
		select {
		case sig := <-c.sigs:
			c.onSignal(sig)
		case err := <-c.outErr:
			c.outErr = nil
			c.onCause(ErrCause(Output, err))
		case <-c.timeoutC:
			c.timeoutC = nil
			c.onTimeout()
		case <-ctxDone:
			ctxDone = nil
			c.onCause(ErrCause(Canceled, c.ctx.Err()))
		case f := <-c.msgs:
			f()
		case f := <-w.Exits:
			f()
		case <-w.Grace:
			c.att.GraceExpired()
		case <-w.Orphans:
			c.att.CheckOrphans()
		case <-w.Poll:
			c.att.CheckOrphans()
		case <-c.job.tick():
			c.jobEvent(jobTick, 0)
		case <-c.quit:
			return
		}
	}
}

// Do runs f on the loop goroutine and returns once the loop has taken it (at once when the controller is closed:
// f is then never run).
func (c *Controller) Do(f func()) {
	select {
	case c.msgs <- f:
	case <-c.done:
	}
}

// Stop reports a cause to stop from any goroutine: a failure of another node, a lost node, the rendezvous store
// gone, a worker that could not start.
func (c *Controller) Stop(x *Cause) { c.Do(func() { c.onCause(x) }) }

// JobContext is canceled by the first job-wide cause: the join, the barrier and the decision to restart use it,
// so a stopping job starts nothing new.
func (c *Controller) JobContext() context.Context { return c.jobCtx }

// JobCause is the first job-wide cause, nil while none.
func (c *Controller) JobCause() *Cause { return CauseOf(c.jobCtx) }

// StopSeq counts the job-wide causes so far (see WaitContext).
func (c *Controller) StopSeq() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}

// WaitContext is parent, also canceled by any job-wide cause after the since'th (StopSeq), before the wait or
// during it, and at once after a second stop: a node that waits for the others' outcome after its own stop still
// waits, but not past the next signal, timeout or lost store.
func (c *Controller) WaitContext(parent context.Context, since int) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	c.mu.Lock()
	if c.seq > since || c.hurried {
		cancel(&stopped{c.last})
	}
	waits := c.waits
	c.mu.Unlock()
	stop := context.AfterFunc(waits, func() { cancel(context.Cause(waits)) })
	return ctx, func() { stop(); cancel(nil) }
}

// onCause takes one cause: a job-wide one is recorded (the first one ends the job) and ends every wait; any cause
// goes to the attempt being supervised, or waits for this generation's attempt.
func (c *Controller) onCause(x *Cause) {
	if x.Reason.JobWide() {
		c.mu.Lock()
		c.cancel(&stopped{x}) // the first one's cause stays
		c.seq++
		c.last = x
		c.endWaits(&stopped{x})
		c.waits, c.endWaits = context.WithCancelCause(context.Background())
		c.mu.Unlock()
	}
	switch {
	case c.att != nil:
		c.att.Stop(x)
	case x.Reason.JobWide():
		c.log.Warn(x.String() + ": stopping the run")
	case c.pending == nil:
		c.pending = x
	}
	if c.job.phase == jobStopping || c.job.phase == jobHeld { // the stop resumes the workers (SIGCONT after the stop signal): so does job control
		c.jobEvent(jobCancel, 0)
	}
}

// BeginGeneration forgets the causes that were for the last generation's attempt.
func (c *Controller) BeginGeneration() { c.Do(func() { c.pending = nil }) }

// Attach makes a the supervised attempt; a cause that came before it applies at once.
func (c *Controller) Attach(a Attempt) {
	c.Do(func() {
		c.att = a
		if x := c.JobCause(); x != nil {
			a.Stop(x)
		} else if c.pending != nil {
			a.Stop(c.pending)
		}
	})
}

// Detach ends the supervision of the attached attempt (on the loop goroutine, when it is over).
func (c *Controller) Detach() { c.att = nil }

// onSignal applies the signal policy (policyOf, below) to one signal tpurun received.
func (c *Controller) onSignal(sig os.Signal) {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return
	}
	switch policyOf(s) {
	case policyStop:
		c.onStopSignal(s)
	case policyJobStop:
		c.jobEvent(jobStopSignal, s)
	case policyContinue:
		c.jobEvent(jobContinue, 0)
	case policyForward:
		if c.att == nil {
			c.log.Info("no worker to forward "+failure.SignalName(s)+" to: between attempts", zap.String("signal", failure.SignalName(s)))
			return
		}
		c.att.Forward(s)
	}
}

// onStopSignal: the first stop signal stops the run; the same one again, or any once the attempt's grace has
// begun, is a second stop: SIGKILL now, and no more waiting for a reader of the output or for the other nodes.
func (c *Controller) onStopSignal(s syscall.Signal) {
	second := c.seen[s] || (c.att != nil && c.att.GraceBegan())
	c.seen[s] = true
	for _, con := range c.consoles {
		con.Stopped(s) // output dropped from now on was lost to s
	}
	if second {
		if c.att == nil { // else the attempt says it, once, as it kills ("second SIGINT: SIGKILL to every worker group")
			c.log.Warn("second stop signal "+failure.SignalName(s)+": not waiting for a reader of the output or for the other nodes",
				zap.String("signal", failure.SignalName(s)))
		}
		c.mu.Lock()
		c.hurried = true
		c.mu.Unlock()
	}
	c.onCause(SignalCause(s)) // a second one too: recorded if it is the first job-wide cause, and every wait ends
	if second && c.att != nil {
		c.att.SecondStop(s, "second "+failure.SignalName(s))
	}
	if second || c.att == nil {
		// Once no worker runs, only readers of the output are left to wait for, and that wait is now bounded (an
		// attempt whose workers all exited bounds it itself).
		c.Hurry()
	}
}

// onTimeout: --timeout stops the run; when the attempt's grace has already begun (it stops for another cause),
// the timeout bounds it too: SIGKILL now.
func (c *Controller) onTimeout() {
	why := "--timeout " + c.timeout.String() + " expired"
	escalate := c.att != nil && c.att.GraceBegan()
	c.onCause(ErrCause(Timeout, fmt.Errorf("%w: %s", failure.ErrTimeout, why)))
	if escalate {
		c.att.SecondStop(0, why)
	}
}

// hurryWrite is how long one write to the launcher's stdout or stderr may wait for its reader after a second stop
// signal; then the rest of the output is discarded.
const hurryWrite = time.Second

// Hurry bounds the wait for a slow reader of tpurun's output: from now on each write waits at most hurryWrite (a
// second stop; a stop once every worker exited).
func (c *Controller) Hurry() {
	for _, con := range c.consoles {
		con.Hurry(hurryWrite)
	}
}

// Abandon drops what the consoles still hold for a reader (a stop signal while the workers' last output drains).
func (c *Controller) Abandon() {
	for _, con := range c.consoles {
		con.Abandon()
	}
}
