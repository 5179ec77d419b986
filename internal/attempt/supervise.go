package attempt

import (
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/proc"
	"tpurun/internal/stop"
)

// supervisor carries out one attempt's machine on the controller's goroutine: it owns the attempt's workers, its
// grace timer and the watch of what they leave behind; its exported methods are the stop.Attempt the controller
// drives. What takes time (the SIGKILL sweep, reading the pipes to EOF) runs in a goroutine that reports back with
// an event.
type supervisor struct {
	r  *Runner
	as Spec
	a  *Attempt
	m  *Machine

	ws       []*child
	exits    chan func() // a worker's exit, taken on the loop (exited)
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

func (s *supervisor) Wakeups() stop.Wakeups {
	w := stop.Wakeups{Exits: s.exits, Grace: s.graceC, Orphans: s.watch}
	if s.poll != nil {
		w.Poll = s.poll.C
	}
	return w
}

func (s *supervisor) Stop(x *stop.Cause) { s.feed(Event{Kind: EvStop, Cause: x}) }

// Forward passes sig to every worker group; SIGWINCH resizes the workers' pseudo-terminals instead when they have
// some (resizeTerminals).
func (s *supervisor) Forward(sig syscall.Signal) {
	if sig == syscall.SIGWINCH && s.resizeTerminals() {
		return
	}
	s.feed(Event{Kind: EvForward, Signal: sig})
}

func (s *supervisor) SecondStop(sig syscall.Signal, why string) {
	s.feed(Event{Kind: EvSecondStop, Signal: sig, Why: why})
}

func (s *supervisor) GraceBegan() bool { return s.m.phase >= Stopping && s.m.cause != nil }

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
		from := s.m.phase
		acts := s.m.Handle(e)
		if s.m.phase != from {
			s.r.Log.Debug("attempt state", zap.Int("attempt", s.as.N), zap.Stringer("from", from), zap.Stringer("to", s.m.phase))
		}
		for _, act := range acts {
			s.do(act)
		}
	}
	s.feeding = false
	if s.m.phase >= Stopping {
		s.stopping.Store(true)
	}
}

func (s *supervisor) do(act Action) {
	switch act.Kind {
	case ActSignal:
		s.stopSignal(act)
	case ActSignalNew:
		s.signalOne(s.ws[len(s.ws)-1], act.Signal)
	case ActKill:
		s.r.Log.Warn(s.m.escalated+": SIGKILL to every worker group", zap.Duration("grace", s.r.Grace))
		s.signalAll(syscall.SIGKILL)
	case ActArmGrace:
		s.armGrace()
	case ActFailed:
		we := act.Cause.Failure
		s.r.Log.Error("worker failed", zap.Int("rank", we.Rank), zap.Int("pid", we.PID), zap.Int("attempt", we.Attempt),
			zap.Int("code", we.ExitCode), zap.String("signal", sigText(we.Signal)))
		s.r.OnFailed(s.as.N, we)
	case ActAnnounce:
		s.as.Announce(act.Cause)
	default:
		s.doLate(act)
	}
}

// doLate carries out the actions of the end of an attempt.
func (s *supervisor) doLate(act Action) {
	switch act.Kind {
	case ActHurry:
		s.r.Ctl.Hurry()
	case ActAbandon:
		s.r.Log.Warn("stop signal while writing the workers' last output: discarding the rest")
		s.r.Ctl.Abandon()
	case ActTermOrphans:
		s.termOrphans()
	case ActSweep:
		s.stopWatch()
		go func() {
			swept := s.r.killAndSweep(s.ws)
			s.r.drain(s.ws)
			s.r.Ctl.Do(func() { s.a.Swept = swept; s.feed(Event{Kind: EvDrained}) })
		}()
	case ActSettle:
		s.settle()
	}
}

// stopSignal sends the stop signal to every group (a forwarded signal when act has no cause).
func (s *supervisor) stopSignal(act Action) {
	if act.Cause == nil {
		s.r.Log.Info("forwarding signal", zap.String("signal", failure.SignalName(act.Signal)))
	} else {
		s.r.Log.Info("stopping all workers: "+act.Cause.String(), zap.String("reason", string(act.Cause.Reason)),
			zap.String("signal", failure.SignalName(act.Signal)), zap.Duration("grace", s.r.Grace))
	}
	s.signalAll(act.Signal)
	if act.Cause != nil && act.Signal != syscall.SIGKILL {
		// A stopped worker keeps the stop signal pending: continued, it runs its handler within the grace period (as
		// Open MPI's launcher, coreutils' timeout and systemd do). A forwarded signal is the user's: not followed.
		s.signalAll(syscall.SIGCONT)
	}
}

// signalAll sends sig to every worker's group, once (proc.Process.Signal).
func (s *supervisor) signalAll(sig syscall.Signal) {
	for _, wk := range s.ws {
		s.signalOne(wk, sig)
	}
}

// signalOne sends sig to wk's group and to its pseudo-terminal's foreground group when that is another (a job a
// worker's shell runs), as a keystroke would reach it. A SIGCONT reaches the job first: a job-control shell resumed
// first would find it stopped and call it "Stopped".
func (s *supervisor) signalOne(wk *child, sig syscall.Signal) {
	fg := s.foreground(wk, sig)
	if fg > 0 && sig == syscall.SIGCONT {
		_ = syscall.Kill(-fg, sig) // gone meanwhile (ESRCH): nothing left to signal
	}
	s.signalGroup(wk, sig)
	if fg > 0 && sig != syscall.SIGCONT {
		_ = syscall.Kill(-fg, sig)
	}
}

// foreground is the foreground process group of wk's controlling pseudo-terminal when it is not wk's own group; 0
// when none, or for SIGWINCH (the kernel's to send there on a resize).
func (s *supervisor) foreground(wk *child, sig syscall.Signal) int {
	if wk.p == nil || wk.ctty == nil || sig == syscall.SIGWINCH {
		return 0
	}
	if g := console.ForegroundGroup(wk.ctty); g > 0 && g != wk.p.PID() {
		return g
	}
	return 0
}

// signalGroup sends sig to wk's group (proc.Process.Signal), once.
func (s *supervisor) signalGroup(wk *child, sig syscall.Signal) {
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

func (s *supervisor) GraceExpired() {
	s.graceC = nil
	s.feed(Event{Kind: EvGrace})
}

// started hands a started worker to the supervisor (from the main goroutine, through the loop); the machine
// counts it. Its exit may have been taken already.
func (s *supervisor) started(wk *child, p *proc.Process) {
	s.r.Ctl.Do(func() {
		if wk.p == nil {
			wk.p = p
		}
		s.ws = append(s.ws, wk)
		if wk.input != nil {
			s.r.Term.inputTo(wk.input)
		}
		s.feed(Event{Kind: EvAdded})
		if sig := s.r.Ctl.JobStopping(); sig != 0 {
			s.jobSignal(wk, sig)
		}
	})
}

// exited takes the exit of worker wk from its (held) process p, possibly before the supervisor learnt it started.
func (s *supervisor) exited(wk *child, p *proc.Process) {
	if wk.p == nil {
		wk.p = p
	}
	ex := wk.p.Status()
	s.r.Sampler.exited(ex.PID)
	s.a.EndOrder = append(s.a.EndOrder, wk.w.Rank)
	s.r.Log.Debug("worker exited", zap.Int("rank", wk.w.Rank), zap.Int("pid", ex.PID),
		zap.Int("code", ex.ExitCode), zap.String("signal", sigText(ex.Signal)), zap.Duration("wall", ex.Wall))
	if wk.input != nil {
		s.r.Term.inputEnd(wk.input)
	}
	var failed *proc.WorkerError
	if !ex.Success() {
		failed = &proc.WorkerError{Rank: wk.w.Rank, Attempt: s.as.N, Exit: ex}
	}
	s.feed(Event{Kind: EvExited, Failed: failed})
}

// termOrphans is the gentle first step of the sweep: what is left of the workers' groups (when they never got a stop
// signal) and every process they left outside them get SIGTERM once, and the rest of the grace to exit.
func (s *supervisor) termOrphans() {
	if s.m.stopSig == 0 {
		s.signalAll(syscall.SIGTERM) // what is left of each group (the leader is a held zombie)
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

func (s *supervisor) CheckOrphans() {
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
	s.r.Ctl.Detach()
	s.stopSeq = s.r.Ctl.StopSeq()
	close(s.settled)
}
