package attempt

import (
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/failure"
	"tpurun/internal/proc"
)

// supervisor carries out one attempt's machine on the controller's goroutine: it owns the attempt's workers, its
// grace timer and the watch of what the workers leave behind, and turns the machine's actions into signals,
// timers and the last sweep. Everything it does happens on the loop goroutine; what takes time (the SIGKILL
// sweep, reading the pipes to EOF) runs in a goroutine that reports back with an event.
type supervisor struct {
	c  *Controller
	r  *Runner
	as Spec
	a  *Attempt
	m  *Machine

	ws       []*child
	exits    chan exitMsg
	grace    *time.Timer
	graceC   <-chan time.Time
	watch    <-chan struct{} // while sweeping: the reaper reaped an orphan (or a poll tick without a reaper)
	poll     *time.Ticker
	queue    []Event
	feeding  bool
	stopping atomic.Bool   // the main goroutine starts no more workers
	settled  chan struct{} // closed when the machine is done
	stopSeq  int           // the controller's count of job-wide causes when the attempt settled
}

// supervisorChans are the channels of the attached attempt the loop selects on (nil ones block forever).
type supervisorChans struct {
	exits <-chan exitMsg
	grace <-chan time.Time
	watch <-chan struct{}
	poll  <-chan time.Time
}

func (s *supervisor) chans() supervisorChans {
	c := supervisorChans{exits: s.exits, grace: s.graceC, watch: s.watch}
	if s.poll != nil {
		c.poll = s.poll.C
	}
	return c
}

// exitMsg is a worker's exit, as its process reported it (possibly before the supervisor learnt it started).
type exitMsg struct {
	wk *child
	p  *proc.Process
}

func newSupervisor(r *Runner, as Spec, a *Attempt, workers int) *supervisor {
	return &supervisor{c: r.Ctl, r: r, as: as, a: a, m: NewMachine(r.Grace), exits: make(chan exitMsg, workers),
		settled: make(chan struct{})}
}

// feed hands e to the machine and carries out the actions, in order; events that actions cause are queued behind.
func (s *supervisor) feed(e Event) {
	s.queue = append(s.queue, e)
	if s.feeding {
		return
	}
	s.feeding = true
	for len(s.queue) > 0 {
		e := s.queue[0]
		s.queue = s.queue[1:]
		from := s.m.Phase()
		acts := s.m.Handle(e)
		if s.m.Phase() != from {
			s.r.Log.Debug("attempt state", zap.Int("attempt", s.as.N), zap.Stringer("from", from), zap.Stringer("to", s.m.Phase()))
		}
		for _, act := range acts {
			s.do(act)
		}
	}
	s.feeding = false
	if s.m.Phase() >= Stopping {
		s.stopping.Store(true)
	}
}

// do carries out one action.
func (s *supervisor) do(act Action) {
	switch act.Kind {
	case ActSignal:
		s.stopSignal(act)
	case ActSignalNew:
		s.signalOne(s.ws[len(s.ws)-1], act.Signal)
	case ActKill:
		s.r.Log.Warn(s.m.Escalated()+": SIGKILL to every worker group", zap.Duration("grace", s.r.Grace))
		s.signalAll(syscall.SIGKILL, 0)
	case ActArmGrace:
		s.armGrace()
	case ActFailed:
		s.failed(act.Cause.Failure)
	case ActAnnounce:
		if s.as.Announce != nil {
			s.as.Announce(act.Cause)
		}
	default:
		s.doLate(act)
	}
}

// doLate carries out the actions of the end of an attempt.
func (s *supervisor) doLate(act Action) {
	switch act.Kind {
	case ActHurry:
		s.c.hurry()
	case ActAbandon:
		s.r.Log.Warn("stop signal while writing the workers' last output: discarding the rest")
		s.c.abandon()
	case ActTermOrphans:
		s.termOrphans()
	case ActSweep:
		s.stopWatch()
		go func() {
			swept := s.r.killAndSweep(s.ws)
			s.c.do(func() { s.a.Swept = swept; s.feed(Event{Kind: EvSwept}) })
		}()
	case ActDrain:
		go func() {
			s.r.drain(s.ws)
			s.c.do(func() { s.feed(Event{Kind: EvDrained}) })
		}()
	case ActSettle:
		s.settle()
	}
}

// stopSignal sends the stop signal to every group (a forwarded signal when act has no cause).
func (s *supervisor) stopSignal(act Action) {
	skip := 0
	if act.Cause == nil {
		s.r.Log.Info("forwarding signal", zap.String("signal", proc.SignalName(act.Signal)))
	} else {
		skip = act.Cause.SkipGroup
		s.r.Log.Info("stopping all workers: "+act.Cause.String(), zap.String("reason", string(act.Cause.Reason)),
			zap.String("signal", proc.SignalName(act.Signal)), zap.Duration("grace", s.r.Grace))
	}
	s.signalAll(act.Signal, skip)
	if act.Cause != nil && act.Signal != syscall.SIGKILL {
		// A stopped worker (Ctrl-Z, SIGTSTP to tpurun as PID 1, kill -STOP) keeps the stop signal pending: continued,
		// it runs its handler within the grace period instead of being SIGKILLed at its end (as Open MPI's launcher,
		// coreutils' timeout and systemd do). A forwarded signal is the user's, stop signals included: not followed.
		s.signalAll(syscall.SIGCONT, skip)
	}
}

// jobStop stops every worker group with sig (SIGTSTP, SIGTTIN, SIGTTOU), as a shell's job stops. A worker that leads
// a session of its own (tpurun at a terminal: its pseudo-terminal is its controlling terminal) is in an orphaned
// group, for which the kernel discards those signals where their default action would stop it: such a group gets
// SIGSTOP instead, which stops it whatever it does with sig (docs/CONTROL.md).
func (s *supervisor) jobStop(sig syscall.Signal) {
	for _, wk := range s.ws {
		if wk.session {
			s.signalOne(wk, syscall.SIGSTOP)
		} else {
			s.signalOne(wk, sig)
		}
	}
}

// signalAll sends sig to every worker's group, once (proc.Process.Signal), but the group skip.
func (s *supervisor) signalAll(sig syscall.Signal, skip int) {
	for _, wk := range s.ws {
		if wk.p != nil && wk.p.PID() != skip {
			s.signalOne(wk, sig)
		}
	}
}

// waitStopped waits until every worker is stopped (a job-control stop took effect) or gone, bound at most: it reads
// their state in /proc, every millisecond or so (the stop takes as long as the workers' scheduling).
func (s *supervisor) waitStopped(procRoot string, bound time.Duration) {
	deadline := time.Now().Add(bound)
	for _, wk := range s.ws {
		for wk.p != nil && !proc.StoppedOrGone(procRoot, wk.p.PID()) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
}

func (s *supervisor) signalOne(wk *child, sig syscall.Signal) {
	if wk.p == nil {
		return
	}
	if err := wk.p.Signal(sig); err != nil {
		s.r.Log.Warn("signal failed", zap.Int("rank", wk.w.Rank), zap.Int("pid", wk.p.PID()), zap.Error(err))
	}
}

func (s *supervisor) armGrace() {
	if s.grace == nil {
		s.grace = time.NewTimer(s.r.Grace)
		s.graceC = s.grace.C
	}
}

func (s *supervisor) graceExpired() {
	s.graceC = nil
	s.feed(Event{Kind: EvGrace})
}

// started hands started workers to the supervisor (from the main goroutine, through the loop, all at once); the
// machine counts each. The exit of one may have been taken already.
func (s *supervisor) started(wks []*child, ps []*proc.Process) {
	if len(wks) == 0 {
		return
	}
	s.c.do(func() {
		for i, wk := range wks {
			if wk.p == nil {
				wk.p = ps[i]
			}
			s.ws = append(s.ws, wk)
			if wk.input != nil {
				s.r.Term.inputTo(wk.input)
			}
			s.feed(Event{Kind: EvAdded})
		}
	})
}

// exited takes one worker's exit (held: a zombie until the attempt is over, its group id reserved).
func (s *supervisor) exited(m exitMsg) {
	wk := m.wk
	if wk.p == nil {
		wk.p = m.p
	}
	wk.exited = true
	wk.exit = wk.p.Status()
	s.r.Sampler.exited(wk.exit.PID)
	ex := wk.exit
	s.a.EndOrder = append(s.a.EndOrder, wk.w.Rank)
	s.r.Log.Debug("worker exited", zap.Int("rank", wk.w.Rank), zap.Int("pid", ex.PID),
		zap.Int("code", ex.ExitCode), zap.String("signal", sigText(ex.Signal)), zap.Duration("wall", ex.Wall))
	if wk.input != nil {
		s.r.Term.inputEnd(wk.input)
	}
	var failed *failure.WorkerError
	if !ex.Success() {
		failed = &failure.WorkerError{Rank: wk.w.Rank, Attempt: s.as.N, Exit: ex}
	}
	s.feed(Event{Kind: EvExited, Failed: failed})
}

// failed reports the first failed worker of the attempt.
func (s *supervisor) failed(we *failure.WorkerError) {
	s.r.Log.Error("worker failed", zap.Int("rank", we.Rank), zap.Int("pid", we.PID), zap.Int("attempt", we.Attempt),
		zap.Int("code", we.ExitCode), zap.String("signal", sigText(we.Signal)))
	if s.r.OnFailed != nil {
		s.r.OnFailed(s.as.N, we)
	}
}

// termOrphans is the gentle first step of the sweep: the workers' groups, when they never got a stop signal, and
// every process they left outside their groups get SIGTERM once; the rest of the grace is theirs to exit.
func (s *supervisor) termOrphans() {
	if s.m.StopSignal() == 0 {
		s.signalAll(syscall.SIGTERM, 0) // what is left of each group (the leader is a held zombie)
	}
	hit := s.r.termOutside(s.ws)
	if s.r.liveOrphans() == 0 {
		s.feed(Event{Kind: EvOrphansGone})
		return
	}
	s.r.Log.Info("the workers left processes behind: SIGTERM, then SIGKILL after the grace period",
		zap.Ints("outside_their_groups", hit), zap.Duration("grace", s.r.Grace))
	s.armGrace()
	if rp, done := s.r.subtree(); rp != nil {
		s.watch = rp.Reaped()
		done()
		return
	}
	s.poll = time.NewTicker(50 * time.Millisecond) // no event says that an orphan found by environment is gone
}

func (s *supervisor) checkOrphans() {
	if s.r.liveOrphans() == 0 {
		s.feed(Event{Kind: EvOrphansGone})
	}
}

func (s *supervisor) stopWatch() {
	s.watch = nil
	if s.poll != nil {
		s.poll.Stop()
		s.poll = nil
	}
}

// settle ends the attempt: the timer stops, the terminal's input goes to no worker of it, the main goroutine goes on.
func (s *supervisor) settle() {
	if s.grace != nil {
		s.grace.Stop()
	}
	s.graceC = nil
	s.stopWatch()
	for _, wk := range s.ws {
		if wk.input != nil {
			s.r.Term.inputEnd(wk.input)
		}
	}
	s.c.detach(s)
	s.stopSeq = s.c.StopSeq()
	close(s.settled)
}

// drain reads every pipe to EOF: with the subtree gone every write end is closed, unless a process outside it
// holds one (see console.Drain). Output is never dropped for a slow console; only a stop signal gives up on it.
func (r *Runner) drain(ws []*child) {
	for _, wk := range ws {
		wk.drain.Begin(r.DrainTimeout, wk.readers...)
	}
	for _, wk := range ws {
		wk.io.Wait()
	}
}
