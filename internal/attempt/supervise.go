package attempt

import (
	"cmp"
	"errors"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/proc"
	"tpurun/worker"
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
		s.r.Log.Info("forwarding signal", zap.String("signal", failure.SignalName(act.Signal)))
	} else {
		skip = act.Cause.SkipGroup
		s.r.Log.Info("stopping all workers: "+act.Cause.String(), zap.String("reason", string(act.Cause.Reason)),
			zap.String("signal", failure.SignalName(act.Signal)), zap.Duration("grace", s.r.Grace))
	}
	s.signalAll(act.Signal, skip)
	if act.Cause != nil && act.Signal != syscall.SIGKILL {
		// A stopped worker (Ctrl-Z, SIGTSTP to tpurun as PID 1, kill -STOP) keeps the stop signal pending: continued,
		// it runs its handler within the grace period instead of being SIGKILLed at its end (as Open MPI's launcher,
		// coreutils' timeout and systemd do). A forwarded signal is the user's, stop signals included: not followed.
		s.signalAll(syscall.SIGCONT, skip)
	}
}

// jobStopSignal stops every worker group with sig (SIGTSTP, SIGTTIN, SIGTTOU), as a shell's job stops (jobStopOne).
func (s *supervisor) jobStopSignal(sig syscall.Signal) {
	for _, wk := range s.ws {
		s.jobStopOne(wk, sig)
	}
}

// jobStopOne stops wk's group with sig. A worker that leads a session of its own (tpurun at a terminal: its
// pseudo-terminal is its controlling terminal) is in an orphaned group, for which the kernel discards those signals
// where their default action would stop it: such a group gets SIGSTOP instead, which stops it whatever it does with
// sig (docs/CONTROL.md); the job in the foreground of its terminal is stopped once the workers are
// (stopForegroundJobs).
func (s *supervisor) jobStopOne(wk *child, sig syscall.Signal) {
	if wk.ctty != nil {
		s.signalGroup(wk, syscall.SIGSTOP)
		return
	}
	s.signalOne(wk, sig)
}

// stopForegroundJobs stops the job in the foreground of each worker's terminal, if another group than the worker's,
// once the workers are stopped: a job-control shell that saw its job stop before it stopped itself would call the
// job "Stopped" and take the terminal back, and fg would not resume it.
func (s *supervisor) stopForegroundJobs() {
	for _, wk := range s.ws {
		if fg := s.foreground(wk, syscall.SIGSTOP); fg > 0 {
			_ = syscall.Kill(-fg, syscall.SIGSTOP)
		}
	}
}

// unstopped are the ranks of the workers neither stopped nor gone (procRoot's /proc), what a job-control stop waits
// for before tpurun stops itself.
func (s *supervisor) unstopped(procRoot string) []int {
	var left []int
	for _, wk := range s.ws {
		if wk.p != nil && !proc.StoppedOrGone(procRoot, wk.p.PID()) {
			left = append(left, wk.w.Rank)
		}
	}
	return left
}

// signalAll sends sig to every worker's group, once (proc.Process.Signal), but the group skip.
func (s *supervisor) signalAll(sig syscall.Signal, skip int) {
	for _, wk := range s.ws {
		if wk.p != nil && wk.p.PID() != skip {
			s.signalOne(wk, sig)
		}
	}
}

// signalOne sends sig to wk's group (signalGroup) and, when wk leads a session whose controlling terminal is a
// pseudo-terminal, to that terminal's foreground group when it is another (a job a worker's shell runs, as a
// terminal's keystroke reaches it): Ctrl-C, Ctrl-Z and fg at tpurun's terminal reach what runs in the foreground
// of the worker's. A SIGCONT reaches the job first: a job-control shell resumed first would find it stopped and
// call it "Stopped".
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

// foreground is the foreground process group of wk's controlling pseudo-terminal when it is not wk's own group, to
// which sig goes too; 0 when none (no such terminal, or SIGWINCH: the kernel's to send there on a resize).
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
			s.c.jobAdded(wk)
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
	var failed *proc.WorkerError
	if !ex.Success() {
		failed = &proc.WorkerError{Rank: wk.w.Rank, Attempt: s.as.N, Exit: ex}
	}
	s.feed(Event{Kind: EvExited, Failed: failed})
}

// failed reports the first failed worker of the attempt.
func (s *supervisor) failed(we *proc.WorkerError) {
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

// sweep kills the orphans of the run. When the job may walk this process's subtree (the reaper's, see subtree)
// every orphan is in it, so it walks exactly that subtree; otherwise, or when the kernel cannot list children, it
// scans every process of the host for the run's sweep tag in its environment.
func (r *Runner) sweep() ([]int, error) {
	if rp, done := r.subtree(); rp != nil {
		swept, err := rp.Sweep(r.ProcRoot)
		done()
		if !errors.Is(err, proc.ErrNoChildrenFile) {
			return swept, err
		}
		r.Log.Debug("subtree sweep unavailable, sweeping by environment", zap.Error(err))
	}
	return proc.Sweep(r.ProcRoot, worker.EnvSweepTag, r.SweepTag, syscall.SIGKILL, r.kept)
}

// termOutside sends SIGTERM once to every live process the workers left outside their own groups (a helper in a
// new session), found as the sweep finds them, and returns their pids.
func (r *Runner) termOutside(ws []*child) []int {
	groups := map[int]bool{}
	for _, wk := range ws {
		if wk.p != nil {
			groups[wk.p.PID()] = true
		}
	}
	inGroups := func(pid int) bool {
		pgid, err := syscall.Getpgid(pid)
		return groups[pid] || err != nil || groups[pgid] || r.kept(pid)
	}
	if rp, done := r.subtree(); rp != nil {
		hit, err := rp.SignalTree(r.ProcRoot, inGroups, syscall.SIGTERM)
		done()
		if !errors.Is(err, proc.ErrNoChildrenFile) {
			return hit
		}
	}
	pids, _ := proc.FindByEnv(r.ProcRoot, worker.EnvSweepTag, r.SweepTag)
	var hit []int
	for _, pid := range pids {
		if !inGroups(pid) && syscall.Kill(pid, syscall.SIGTERM) == nil {
			hit = append(hit, pid)
		}
	}
	return hit
}

// liveOrphans counts the processes of the run still alive once every worker has exited.
func (r *Runner) liveOrphans() int {
	if rp, done := r.subtree(); rp != nil {
		defer done()
		if _, err := os.Stat(r.ProcRoot + "/self/task/" + strconv.Itoa(os.Getpid()) + "/children"); err == nil {
			return rp.LiveDescendants(r.ProcRoot, r.kept)
		}
	}
	pids, _ := proc.FindByEnv(r.ProcRoot, worker.EnvSweepTag, r.SweepTag)
	return len(slices.DeleteFunc(pids, r.kept))
}

// kept reports whether pid is a process of the job that outlives its attempts (the preloaded interpreter).
func (r *Runner) kept(pid int) bool {
	return r.Reaper != nil && r.Reaper.Kept(pid)
}

// killAndSweep sends SIGKILL to every group and sweeps the subtree; it returns the pids the sweep had to kill.
func (r *Runner) killAndSweep(ws []*child) []int {
	for _, wk := range ws {
		if wk.p != nil {
			_ = wk.p.Signal(syscall.SIGKILL)
		}
	}
	swept, err := r.sweep()
	if err != nil {
		r.Log.Warn("orphan sweep incomplete", zap.Error(err))
	}
	if len(swept) > 0 {
		r.Log.Warn("orphan sweep killed processes that outlived their worker group", zap.Ints("pids", swept))
	}
	return swept
}

// reaping is this process's reaper while it is in use: started by the first Run that reaps (or by Reap), shared
// by the Runs in flight (a reaper waits for every child of the process: there is one or none), closed when the
// last user is done.
var reaping struct {
	sync.Mutex
	rp      *proc.Reaper
	runs    int  // the Runs using rp: the subtree is a Run's to walk only while it is the only one
	holders int  // the callers of Reap keeping rp
	setSub  bool // this process became the child subreaper for rp, and stops being one when rp closes
}

// Reap makes this process reap its orphans until stop is called: it becomes the child subreaper (PID 1 reaps
// anyway) and starts the reaper that the Runs of the process share (see Spec.Reap). Run does this itself for
// as long as it runs; Reap keeps the reaper beyond one Run: across several, or until the program's last words
// (tpurun's last line comes before the reaper's count of the orphans it reaped). It fails when the process cannot
// become the subreaper.
func Reap(log *zap.Logger) (stop func(), err error) {
	_, stop, err = useReaper(log, &reaping.holders)
	return stop, err
}

// useReaper lends the process's reaper to a user counted in count, starting it (and making this process the child
// subreaper, unless it is PID 1 or one already) when nobody holds it; release gives it back.
func useReaper(log *zap.Logger, count *int) (rp *proc.Reaper, release func(), err error) {
	log = cmp.Or(log, zap.NewNop())
	reaping.Lock()
	defer reaping.Unlock()
	if reaping.rp == nil {
		set := os.Getpid() != 1 && !proc.IsSubreaper()
		if set {
			if err := proc.SetSubreaper(); err != nil {
				return nil, nil, err
			}
		}
		reaping.rp, reaping.setSub = proc.NewReaper(log), set
	}
	*count++
	rp = reaping.rp
	return rp, sync.OnceFunc(func() {
		reaping.Lock()
		defer reaping.Unlock()
		if *count--; reaping.runs+reaping.holders > 0 {
			return
		}
		rp.Close()
		if reaping.setSub {
			if err := proc.ClearSubreaper(); err != nil {
				log.Warn("could not stop being the child subreaper", zap.Error(err))
			}
		}
		reaping.rp = nil
	}), nil
}

// StartReaping sets up what the job's Spec leaves to Run: the signals it catches (sigs nil, unless noSignals) and
// the reaper (unless noReaper; PID 1 always reaps). It returns the run's signals, the reaper lent to the run (nil
// without one) and stop, which undoes both once the job is over.
func StartReaping(log *zap.Logger, sigs <-chan os.Signal, noSignals, noReaper bool) (_ <-chan os.Signal, rp *proc.Reaper, stop func()) {
	var undo []func()
	if sigs == nil && !noSignals {
		var stopSigs func()
		sigs, stopSigs = NotifySignals()
		undo = append(undo, stopSigs)
	}
	if !noReaper || os.Getpid() == 1 {
		r, release, err := useReaper(log.Named("reaper"), &reaping.runs)
		if err != nil {
			log.Warn("cannot become the child subreaper; sweeping orphans by environment", zap.Error(err))
		} else {
			rp = r
			undo = append(undo, release)
		}
	}
	return sigs, rp, func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
}

// subtree is the reaper when the job may walk the whole subtree of this process (see Spec.SweepSubtree): it runs
// nothing but this job, the only Run that uses the reaper. done ends the walk; no other Run takes the reaper meanwhile.
// nil: the job finds its processes by their environment.
func (r *Runner) subtree() (rp *proc.Reaper, done func()) {
	if r.Reaper == nil || !r.SweepSubtree {
		return nil, nil
	}
	reaping.Lock()
	if reaping.rp != r.Reaper || reaping.runs != 1 {
		reaping.Unlock()
		return nil, nil
	}
	return r.Reaper, reaping.Unlock
}
