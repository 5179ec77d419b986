package attempt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/proc"
	"tpurun/internal/topology"
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
	job      jobControl // job control: SIGTSTP, SIGTTIN, SIGTTOU and SIGCONT

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
		case <-c.job.tick():
			c.jobEvent(jobTick, 0)
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
	if c.job.phase == jobStopping || c.job.phase == jobHeld { // the stop resumes the workers (SIGCONT after the stop signal): so does job control
		c.jobEvent(jobCancel, 0)
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
		if s == syscall.SIGWINCH && c.att != nil && c.att.resizeTerminals() {
			return
		}
		if c.att == nil {
			c.log.Info("no worker to forward "+failure.SignalName(s)+" to: between attempts", zap.String("signal", failure.SignalName(s)))
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
	if c.att == nil { // else the attempt says it, once, as it kills ("second SIGINT: SIGKILL to every worker group")
		c.log.Warn("second stop signal "+failure.SignalName(s)+": not waiting for a reader of the output or for the other nodes",
			zap.String("signal", failure.SignalName(s)))
	}
	c.mu.Lock()
	c.hurried = true
	c.mu.Unlock()
	c.onCause(SignalCause(s)) // recorded if it is the first job-wide cause, and every wait ends
	if c.att != nil {
		c.att.feed(Event{Kind: EvSecondStop, Signal: s, Why: "second " + failure.SignalName(s)})
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

// sigPolicy is what tpurun does with a signal it receives: the table of docs/CONTROL.md, in one place.
type sigPolicy int

// The signal policies.
const (
	policyForward  sigPolicy = iota // sent once to every worker group; the run goes on
	policyStop                      // the run stops: sent as is to every group, grace, SIGKILL
	policyJobStop                   // job control: every group stopped, then tpurun stops itself
	policyContinue                  // SIGCONT: sent to every group
	policyOwn                       // tpurun's own, never forwarded: SIGCHLD, SIGURG, SIGPIPE, SIGPROF
	policyNone                      // cannot be caught: SIGKILL, SIGSTOP, and 32-34 (the C libraries')
)

// policyOf is the policy of s.
func policyOf(s syscall.Signal) sigPolicy {
	switch s {
	case syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT:
		return policyStop
	case syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
		return policyJobStop
	case syscall.SIGCONT:
		return policyContinue
	case syscall.SIGCHLD, syscall.SIGURG, syscall.SIGPIPE, syscall.SIGPROF:
		return policyOwn
	case syscall.SIGKILL, syscall.SIGSTOP, 32, 33, 34: // 32-34: the C libraries' own; Go cannot catch them
		return policyNone
	}
	if s < 1 || s > 64 {
		return policyNone
	}
	return policyForward
}

// caughtSignals are the signals tpurun catches (for Spec.Signals): every signal it acts on or forwards (see
// policyOf), except those this process inherited as ignored (SIG_IGN) and can still see as such — SIGHUP and
// SIGINT (Go's runtime keeps them ignored), SIGTSTP, SIGTTIN, SIGTTOU and SIGCONT (Go never touches them) —: left
// uncaught, they stay ignored in tpurun and in every worker, as exec gives them (nohup, a shell's background
// job). Call it before any signal.Notify of the process.
func caughtSignals() []os.Signal {
	ignored := ignoredAtStart()
	var out []os.Signal
	for n := 1; n <= 64; n++ {
		s := syscall.Signal(n)
		switch policyOf(s) {
		case policyOwn, policyNone:
			continue
		}
		if ignored&(1<<(n-1)) != 0 || signal.Ignored(s) {
			continue
		}
		out = append(out, s)
	}
	return out
}

// ignoredAtStart is the mask of this process's ignored signals (SigIgn of /proc/self/status); 0 when unreadable.
func ignoredAtStart() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			m, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return m
		}
	}
	return 0
}

// NotifySignals routes every caught signal (see caughtSignals) to the returned channel, for Spec.Signals, and SIGPIPE
// nowhere: with it caught, a write to a closed stdout or stderr fails with EPIPE, which the run reports, instead of
// the Go runtime killing tpurun without a teardown. stop undoes it.
func NotifySignals() (sigs <-chan os.Signal, stop func()) {
	c, pipe := make(chan os.Signal, 64), make(chan os.Signal, 1)
	signal.Notify(c, caughtSignals()...)
	signal.Notify(pipe, syscall.SIGPIPE)
	return c, func() { signal.Stop(c); signal.Stop(pipe) }
}

// HurryOnStop is what a stop signal from sigs does once the run is over (Run has returned): nothing is left to stop,
// only writes of the output to wait for (the results, the document, the last flush), and from then on each write of
// the consoles waits at most console.AfterStop for its reader (console.Stop); the exit is then 128+N if output was
// dropped. Other signals are dropped: no worker is left to forward them to. It reads sigs until the process exits.
func HurryOnStop(sigs <-chan os.Signal, consoles ...*console.Console) {
	if sigs == nil {
		return
	}
	go func() {
		for s := range sigs {
			if sig, ok := s.(syscall.Signal); ok && policyOf(sig) == policyStop {
				console.Stop(sig, consoles...)
			}
		}
	}()
}

// Coalesce relays in to the returned channel without ever losing a signal that matters: it takes every signal
// from in at once (so the os/signal channel behind in never fills and drops one) and keeps each distinct signal
// pending once — a stop signal twice (the second one means "kill now") — in arrival order, until the controller
// takes it. A storm of SIGUSR1 is one pending SIGUSR1, as the kernel merges a pending signal; the SIGTERM behind
// it is still delivered. It returns when done is closed.
func Coalesce(in <-chan os.Signal, done <-chan struct{}) <-chan os.Signal {
	out := make(chan os.Signal)
	go func() {
		var pending []os.Signal
		for {
			var send chan os.Signal
			var next os.Signal
			if len(pending) > 0 {
				send, next = out, pending[0]
			}
			select {
			case s := <-in:
				if pendingCount(pending, s) < repeats(s) {
					pending = append(pending, s)
				}
			case send <- next:
				pending = pending[1:]
			case <-done:
				return
			}
		}
	}()
	return out
}

func pendingCount(pending []os.Signal, s os.Signal) int {
	n := 0
	for _, p := range pending {
		if p == s {
			n++
		}
	}
	return n
}

// repeats is how many of s may be pending at once: a stop signal twice (a second SIGINT kills at once), any other
// once.
func repeats(s os.Signal) int {
	if sig, ok := s.(syscall.Signal); ok && policyOf(sig) == policyStop {
		return 2
	}
	return 1
}

// ExitWithParent makes this process send itself SIGTERM when the process that started it exits (the process, not
// the thread that forked it: proc.ExitWithParent), so a launcher whose caller was killed stops its workers
// gracefully instead of running on. A caller that is already
// gone is a *failure.SignalError (exit 143).
func ExitWithParent() error {
	if err := proc.ExitWithParent(syscall.SIGTERM); err != nil {
		if errors.Is(err, proc.ErrParentGone) {
			return &failure.SignalError{Signal: syscall.SIGTERM, During: "the start: the process that started tpurun has already exited"}
		}
		return fmt.Errorf("%w: %w", failure.ErrInternal, err)
	}
	return nil
}

// Terminal is tpurun's controlling terminal while its stdin is that terminal and tpurun's process group was its
// foreground group at the start (an interactive shell, docker run -it). tpurun keeps it: its group stays the
// foreground group, so Ctrl-C, Ctrl-\ and Ctrl-Z reach tpurun, which acts on the whole job, and what is typed there
// is relayed, a line at a time as the terminal (never put in raw mode) gives it, to local rank 0's pseudo-terminal
// (docs/CONTROL.md, "Terminal and stdin").
type Terminal struct {
	f   *os.File
	fd  int
	own int // tpurun's process group

	mu      sync.Mutex
	to      *os.File // local rank 0's pseudo-terminal (its master), nil while none takes input
	started bool
	wake    [2]int        // a pipe: Close wakes the relay
	done    chan struct{} // closed when the relay returned
}

// OpenTerminal is the terminal behind stdin when tpurun is in its foreground, else nil.
func OpenTerminal(stdin *os.File) *Terminal {
	if stdin == nil {
		return nil
	}
	fd := int(stdin.Fd())
	fg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP) // ENOTTY: not a terminal, or not tpurun's controlling one
	if err != nil || fg != syscall.Getpgrp() {
		return nil
	}
	return &Terminal{f: stdin, fd: fd, own: fg, wake: [2]int{-1, -1}, done: make(chan struct{})}
}

// foreground is the terminal's foreground process group now (0 when it cannot be read).
func (t *Terminal) foreground() int {
	fg, err := unix.IoctlGetInt(t.fd, unix.TIOCGPGRP)
	if err != nil {
		return 0
	}
	return fg
}

// inputTo makes m (a worker's pseudo-terminal master) the one that gets what is typed from now on; the relay starts
// with the first.
func (t *Terminal) inputTo(m *os.File) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.to = m
	if t.started {
		return
	}
	if err := unix.Pipe2(t.wake[:], unix.O_CLOEXEC); err != nil {
		t.to = nil // no relay without a way to end it: the worker reads nothing
		return
	}
	t.started = true
	go t.relay()
}

// inputEnd stops relaying to m (its worker exited, or its attempt is over): what is typed next stays in the terminal
// for whoever reads it next.
func (t *Terminal) inputEnd(m *os.File) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.to == m {
		t.to = nil
	}
}

func (t *Terminal) target() *os.File {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.to
}

// Close ends the relay.
func (t *Terminal) Close() {
	t.mu.Lock()
	started := t.started
	t.mu.Unlock()
	if !started {
		return
	}
	_, _ = unix.Write(t.wake[1], []byte{0})
	<-t.done
	_, _ = unix.Close(t.wake[0]), unix.Close(t.wake[1])
}

// veof is the end of input a canonical terminal takes (Ctrl-D), sent on to the worker's terminal for each end of
// input and each partial line (what Ctrl-D after some text gives) that tpurun's terminal gives.
const veof = 4

// relay copies what is typed at the terminal to the worker's terminal of the moment. It reads only when the
// terminal has input, tpurun's group is its foreground group and a worker takes it: in the background (bg, Ctrl-Z)
// a read would stop tpurun (SIGTTIN) or take the shell's input, and between attempts the input waits in the
// terminal.
func (t *Terminal) relay() {
	defer close(t.done)
	buf := make([]byte, 4096)
	for {
		fds := []unix.PollFd{{Fd: int32(t.fd), Events: unix.POLLIN}, {Fd: int32(t.wake[0]), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if fds[1].Revents != 0 || fds[0].Revents&unix.POLLIN == 0 { // Close, or the terminal hung up
			return
		}
		to := t.target()
		if to == nil || t.foreground() != t.own {
			if t.pause() {
				return
			}
			continue
		}
		n, err := unix.Read(t.fd, buf)
		switch {
		case errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN):
			continue
		case err != nil:
			return // EIO: hung up
		}
		in := buf[:n]
		if n == 0 || in[n-1] != '\n' {
			in = append(in, veof) // Ctrl-D typed: an end of input, or a partial line pushed
		}
		_, _ = to.Write(in) // fails once the worker's terminal is closed: the input was for it
	}
}

// pause waits a moment (input the relay does not take yet), or until Close (true).
func (t *Terminal) pause() bool {
	fds := []unix.PollFd{{Fd: int32(t.wake[0]), Events: unix.POLLIN}}
	n, _ := unix.Poll(fds, int(100*time.Millisecond/time.Millisecond))
	return n > 0
}

// stdinFor is what worker w reads, and whether it reads the terminal through a pseudo-terminal of its own: with a
// terminal in tpurun's foreground, local rank 0 does (see Terminal) and the others read /dev/null, as the terminal
// gives its input to one reader.
func (r *Runner) stdinFor(w topology.Worker) (*os.File, bool) {
	switch {
	case r.Stdin == nil || r.StdinTo == console.StdinNone:
		return nil, false
	case r.Term != nil && r.Term.foreground() == r.Term.own:
		return nil, w.LocalRank == 0
	case r.Term != nil || isTerminal(r.Stdin):
		return nil, false // tpurun runs in the background: a reader of the terminal would be stopped (SIGTTIN)
	case r.StdinTo == console.StdinFirst && w.LocalRank != 0:
		return nil, false
	}
	return r.Stdin, false
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// windowSize is the size of tpurun's terminal (its stdout's, else its stderr's, else its stdin's), nil without one.
func (r *Runner) windowSize() *unix.Winsize {
	for _, c := range []*console.Console{r.Stdout, r.Stderr} {
		if c != nil {
			if ws := c.WindowSize(); ws != nil {
				return ws
			}
		}
	}
	if r.Term != nil {
		if ws, err := unix.IoctlGetWinsize(r.Term.fd, unix.TIOCGWINSZ); err == nil {
			return ws
		}
	}
	return nil
}

// resizeTerminals gives every worker's pseudo-terminal tpurun's window size (SIGWINCH): the kernel sends SIGWINCH
// to each one's foreground group when it changed; a worker without one gets the signal from tpurun. It reports
// false when no worker has one (the signal is then forwarded as any other).
func (s *supervisor) resizeTerminals() bool {
	ws := s.r.windowSize()
	some := false
	for _, wk := range s.ws {
		some = some || len(wk.masters) > 0
	}
	if !some {
		return false
	}
	for _, wk := range s.ws {
		if len(wk.masters) == 0 {
			s.signalOne(wk, syscall.SIGWINCH)
		}
	}
	s.resizeMasters(ws)
	return true
}

// resizeMasters gives every worker's pseudo-terminal the window size ws (nil: none known); the kernel signals the
// foreground group of each one whose size changed. After a resume too: the terminal may have been resized while
// the job was stopped or in the background, when the SIGWINCH went to the shell.
func (s *supervisor) resizeMasters(ws *unix.Winsize) {
	for _, wk := range s.ws {
		for _, m := range wk.masters {
			if ws == nil {
				return
			}
			if err := console.Resize(m, ws); err != nil && !errors.Is(err, os.ErrClosed) {
				s.r.Log.Debug("window size not passed on", zap.Int("rank", wk.w.Rank), zap.Error(err))
			}
		}
	}
}
