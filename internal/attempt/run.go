// Package attempt owns one attempt of this node's workers and how it, and then the job, ended. The job fills a
// Runner once (what every attempt shares: the command, the outputs, the reaper, the sampler, the terminal, the
// controller) and runs each attempt with a Spec (its number, its plan, where results go); the Attempt it returns
// is the attempt's record (each rank's exit, usage, stderr tail and error file).
//
// Along the attempt it offers: the Machine (a pure value of Phases, Events and Actions) and one Verdict per attempt,
// with the Cause of its stop, from which the exit code, the summary line and the root cause derive; the start of
// the workers (their commands and streams, the argument limit, the log files, live sampling); the run's one stop
// controller (docs/CONTROL.md: the only reader of signals and timers, owning every reason to stop in every phase,
// job control as one state; the job asks it for the contexts of its own waits), with the signal policy and the
// terminal; and the supervisor that feeds the Machine and carries out its actions on the controller's goroutine
// (signals, the grace timer, the drain of the pipes), the sweep of what the workers leave and the process's reaper.
// It does not own the job's generations (internal/job), the processes' primitives (internal/proc) or the console.
package attempt

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/proc"
	"tpurun/internal/results"
	"tpurun/internal/topology"
)

// stderrTailLines is how many last stderr lines of a failed rank the report shows.
const stderrTailLines = 10

// Runner runs the attempts of this node's workers, one at a time: what every attempt of a run shares, filled once
// by the job after the host's preparation (the job's narrow interface to its attempts).
type Runner struct {
	Program               []string // the workers' command; ${local_rank} in an argument is expanded per worker
	Env                   []string // the inherited environment
	Dir                   string   // the workers' working directory; "" is this process's
	RunID, Role, SweepTag string
	MaxRestarts           int
	Grace                 time.Duration // SIGTERM to SIGKILL
	Timeout               time.Duration // the job's --timeout, named in a verdict; 0 means none
	DrainTimeout          time.Duration // how long a pipe may stay idle once the subtree is gone

	LogDir  string // the log directory, "" without one
	RunLogs string // this run's directory below LogDir: <run-id>_<random>
	Scratch string // holds the error files when there is no log directory

	// What goes where: the streams shown, sent to the log files only, or both; the line prefix; stdin.
	LocalRanksFilter []int
	Redirects, Tee   console.StdSpec
	LogPrefix        string
	RawOutput        bool
	Stdout, Stderr   *console.Console
	Stdin            *os.File
	StdinTo          console.StdinMode

	ProcRoot     string // where the sweep reads the processes
	SweepSubtree bool   // the sweep may walk this process's whole subtree (see Spec.SweepSubtree)

	Log     *zap.Logger
	Starter Starter      // starts a worker otherwise than by exec (the preloaded interpreter); nil: exec
	Reaper  *proc.Reaper // the process's reaper, lent to the run; nil without one
	Sampler *Sampler
	Term    *Terminal   // the terminal whose input goes to local rank 0; nil without one
	Ctl     *Controller // the one stop controller of the run

	OnStart  func(n int)                       // attempt n begins, before its workers start
	OnFailed func(n int, we *proc.WorkerError) // the first failed worker of attempt n, before the others are stopped
}

// Spec is one attempt of the local group, fixed before it starts: which workers of which plan, the
// run-time values their environment gets, where results go, and who hears of this node's own stop.
type Spec struct {
	N          int // attempt (generation) number: TORCHELASTIC_RESTART_COUNT
	Plan       *topology.Plan
	NodeRank   int
	MasterAddr string
	MasterPort int
	Sink       Sink
	Announce   func(*Cause) // called once, on the controller's goroutine, when this node begins to stop; must not block
}

// child is one started worker process of one attempt.
type child struct {
	w       topology.Worker
	p       *proc.Process // set on the controller's goroutine
	readers []*os.File    // the launcher's ends: stdout, stderr (stdout's when oneStream), results (then local rank 0's terminal, see terminalInput)
	one     bool          // stdout and stderr are one pipe or pseudo-terminal (see oneStream): errTail holds both
	files   []*os.File    // log files
	fwd     []forward     // of stdout and stderr (and the terminal), attached once the worker started
	masters []*os.File    // the readers that are pseudo-terminals (tpurun at a terminal): tpurun's window size follows
	input   *os.File      // the pseudo-terminal that gets what is typed at tpurun's terminal, nil when none
	ctty    *os.File      // the master of its controlling terminal when it leads a session of its own, else nil
	io      sync.WaitGroup
	errTail console.Tail
	errFile string
	resErr  error
	exit    proc.Exit
	exited  bool
	// drain reads the worker's pipes: once its subtree is gone, a pipe that stays idle for the drain timeout is
	// given up (see console.Drain).
	drain console.Drain
}

// forward is one forwarder of a worker's output and what it reads.
type forward struct {
	*console.Forwarder
	from *os.File
}

// Run starts every local worker of as once and lets the controller supervise them (supervisor, Machine)
// until every one has exited, the groups are killed, the orphans swept and the pipes drained; then it releases
// the held zombies and summarizes each rank. Its Verdict says how it ended; stopSeq is the controller's count of
// job-wide causes when it ended (Controller.StopSeq).
func (r *Runner) Run(as Spec) (a *Attempt, stopSeq int) {
	n := as.N
	local := as.Plan.Local(as.NodeRank)
	a = &Attempt{Number: n}
	if r.OnStart != nil {
		r.OnStart(n)
	}
	if r.LogDir != "" {
		a.LogDir = filepath.Join(r.LogDir, r.RunLogs, "attempt_"+strconv.Itoa(n))
	}
	s := newSupervisor(r, as, a, len(local))
	r.Ctl.attach(s)
	if err := r.makeLogDirs(n, local); err != nil {
		r.Ctl.Stop(ErrCause(StopStart, err)) // nothing started
	} else {
		r.startAll(s, local)
	}
	r.Ctl.do(func() { s.feed(Event{Kind: EvStarted}) })
	<-s.settled
	r.release(a, s.ws)
	a.Verdict = s.m.Verdict(n, r.Timeout)
	if a.Verdict.Reason == StopDone {
		for _, rs := range a.Ranks {
			if rs.ResultErr != nil {
				err := &failure.ResultError{Rank: rs.Rank, PID: rs.PID, Err: rs.ResultErr}
				a.Verdict = &Verdict{Reason: StopDone, Code: failure.ExitCode(err), Node: -1, Err: err}
				break
			}
		}
	}
	return a, s.stopSeq
}

// release lets every held zombie be reaped (with its resource usage), closes the pipes and log files and fills
// in the per-rank summaries.
func (r *Runner) release(a *Attempt, ws []*child) {
	for _, wk := range ws {
		wk.exit = wk.p.Release() // the group is torn down: let the pid go, with the resource usage
	}
	present := r.errorFiles()
	for _, wk := range ws {
		for _, f := range slices.Concat(wk.readers, wk.files) {
			_ = f.Close()
		}
		ex := wk.exit
		s := RankSummary{
			Rank: wk.w.Rank, LocalRank: wk.w.LocalRank, Exit: ex,
			Sampled: r.Sampler.remove(ex.PID), StderrTail: wk.errTail.Lines(stderrTailLines), TailHasStdout: wk.one,
			ErrorFile: wk.errFile, ResultErr: wk.resErr,
		}
		if r.LogDir == "" {
			s.ErrorFile = "" // it lived in the run's scratch directory, removed at the end: name no path that is gone
		}
		var rec *ErrorRecord
		var err error
		if present == nil || present[filepath.Base(wk.errFile)] {
			rec, err = readErrorFile(wk.errFile)
		}
		if err != nil {
			r.Log.Warn("unreadable TORCHELASTIC_ERROR_FILE", zap.Int("rank", wk.w.Rank), zap.Error(err))
		}
		s.Error = rec
		a.Ranks = append(a.Ranks, s)
	}
}

// errorFiles are the names in the run's scratch directory, where the workers' TORCHELASTIC_ERROR_FILEs are without
// a log directory: one listing instead of an open per worker, most of which find nothing. nil when unknown (a log
// directory, or the listing failed): each file is looked for.
func (r *Runner) errorFiles() map[string]bool {
	if r.LogDir != "" || r.Scratch == "" {
		return nil
	}
	ents, err := os.ReadDir(r.Scratch)
	if err != nil {
		return nil
	}
	names := make(map[string]bool, len(ents))
	for _, e := range ents {
		names[e.Name()] = true
	}
	return names
}

func sigText(s syscall.Signal) string {
	if s == 0 {
		return ""
	}
	return failure.SignalName(s)
}

// Phase is the state of one attempt of this node's workers (see docs/CONTROL.md).
type Phase int

// The phases of an attempt, in the order it goes through them (it may skip some).
const (
	Starting Phase = iota // workers are being started
	Running               // every worker started, none asked to stop
	Stopping              // the stop signal went to every group; the grace timer runs
	Killing               // SIGKILL went to every group
	Sweeping              // every worker exited; what they left gets a gentle signal and the rest of the grace
	Draining              // SIGKILL to every group and the subtree, then every pipe read to EOF
	Done                  // the attempt is over
)

var phaseNames = [...]string{"starting", "running", "stopping", "killing", "sweeping", "draining", "done"}

func (p Phase) String() string { return phaseNames[p] }

// EventKind is what happens to an attempt.
type EventKind int

// The events of an attempt.
const (
	EvAdded       EventKind = iota // a worker was started
	EvStarted                      // the start of workers is over (all, or as many as it got to)
	EvExited                       // a worker exited; Failed says whether it failed
	EvStop                         // a cause to stop (the first one decides the verdict)
	EvSecondStop                   // a second stop signal, or the timeout once the grace began: SIGKILL now
	EvForward                      // a signal to pass to every worker group
	EvGrace                        // the grace period expired
	EvOrphansGone                  // nothing the workers left is alive any more
	EvSwept                        // SIGKILL went to every group and the subtree sweep is over
	EvDrained                      // every pipe was read to EOF
)

// Event is one event, with what its kind needs.
type Event struct {
	Kind   EventKind
	Failed *proc.WorkerError // EvExited: the worker failed
	Cause  *Cause            // EvStop
	Signal syscall.Signal    // EvForward, EvSecondStop (the signal, 0 for the timeout)
	Why    string            // EvSecondStop: "second SIGTERM", "--timeout 5s expired"
}

// ActionKind is one thing the supervisor does for a transition.
type ActionKind int

// The actions of an attempt's transitions.
const (
	ActSignal      ActionKind = iota // Signal to every worker group (but Cause.SkipGroup), once per group
	ActSignalNew                     // Signal to the worker just added (the others got it already)
	ActKill                          // SIGKILL to every worker group
	ActArmGrace                      // start the grace timer (once per attempt)
	ActFailed                        // a worker failed: log it, tell the observers
	ActAnnounce                      // tell the other nodes (Cause)
	ActHurry                         // bound the wait for a slow reader of tpurun's output (a second stop; a stop once all exited)
	ActAbandon                       // drop what the consoles still hold (a stop signal while draining)
	ActTermOrphans                   // SIGTERM to what the workers left, not signalled yet; watch the subtree empty
	ActSweep                         // SIGKILL to every group and the subtree (then EvSwept)
	ActDrain                         // read every pipe to EOF (then EvDrained)
	ActSettle                        // the attempt is over: wake whoever waits for it
)

// Action is one step the supervisor takes.
type Action struct {
	Kind   ActionKind
	Signal syscall.Signal
	Cause  *Cause
}

// Machine is one attempt's state: a value with no process, timer or goroutine in it, so that every transition can
// be tested alone (a table of transitions). Handle is the only place the phase changes; the supervisor feeds it events
// and carries out the actions it returns, in order.
type Machine struct {
	phase     Phase
	workers   int // started
	exited    int
	startDone bool
	cause     *Cause         // the first cause to stop: it decides the verdict
	stopSig   syscall.Signal // what the groups got when the attempt began to stop
	escalated string         // why SIGKILL was needed
	grace     string         // the grace period in words, for escalated
}

// NewMachine is the machine of an attempt about to start, whose grace period (SIGTERM to SIGKILL) is grace.
func NewMachine(grace fmt.Stringer) *Machine {
	return &Machine{grace: grace.String()}
}

// Phase is the attempt's phase now.
func (m *Machine) Phase() Phase { return m.phase }

// Cause is the first cause to stop, which decides the verdict; nil while none (and for an attempt whose workers
// all ended on their own).
func (m *Machine) Cause() *Cause { return m.cause }

// StopSignal is what the groups got when the attempt began to stop; 0 while it has not.
func (m *Machine) StopSignal() syscall.Signal { return m.stopSig }

// Escalated says why SIGKILL was needed ("grace 7s expired", "second SIGTERM"); "" while it was not.
func (m *Machine) Escalated() string { return m.escalated }

// Verdict is the verdict of the attempt (number n) as the machine leaves it, with timeout the job's --timeout.
func (m *Machine) Verdict(n int, timeout time.Duration) *Verdict {
	return m.cause.verdict(n, timeout, m.escalated)
}

// Handle applies e and returns what to do, in order.
func (m *Machine) Handle(e Event) []Action {
	switch e.Kind {
	case EvAdded:
		return m.onAdded()
	case EvStarted:
		return m.onStarted()
	case EvExited:
		return m.onExited(e.Failed)
	case EvStop:
		return m.onStop(e.Cause)
	case EvSecondStop:
		return m.onSecondStop(e.Signal, e.Why)
	case EvForward:
		if m.phase <= Killing {
			return []Action{{Kind: ActSignal, Signal: e.Signal}}
		}
	case EvGrace:
		return m.onGrace()
	default:
		return m.onEnding(e.Kind)
	}
	return nil
}

// onStarted: no more workers will start; the attempt runs, or is over already.
func (m *Machine) onStarted() []Action {
	m.startDone = true
	if m.phase == Starting {
		m.phase = Running
	}
	return m.maybeAllExited()
}

// onEnding takes the events of the end: nothing left alive, the SIGKILL sweep over, the pipes drained.
func (m *Machine) onEnding(k EventKind) []Action {
	switch {
	case k == EvOrphansGone && m.phase == Sweeping:
		m.phase = Draining
		return []Action{{Kind: ActSweep}}
	case k == EvSwept && m.phase == Draining:
		return []Action{{Kind: ActDrain}}
	case k == EvDrained && m.phase == Draining:
		m.phase = Done
		return []Action{{Kind: ActSettle}}
	}
	return nil
}

// onAdded counts a started worker; one started while the attempt stops gets what the others got.
func (m *Machine) onAdded() []Action {
	m.workers++
	switch m.phase {
	case Stopping:
		return []Action{{Kind: ActSignalNew, Signal: m.stopSig}}
	case Killing:
		return []Action{{Kind: ActSignalNew, Signal: syscall.SIGKILL}}
	}
	return nil
}

// onExited counts an exit; the first failure while nothing stops the attempt is its cause.
func (m *Machine) onExited(failed *proc.WorkerError) []Action {
	m.exited++
	var acts []Action
	if failed != nil && m.phase <= Running {
		acts = m.onStop(FailureCause(failed))
	}
	return append(acts, m.maybeAllExited()...)
}

// maybeAllExited moves on once every started worker has exited and no more will start.
func (m *Machine) maybeAllExited() []Action {
	if !m.startDone || m.exited < m.workers || m.phase > Killing {
		return nil
	}
	if m.phase == Killing { // the grace is over: no gentle step for what they left
		m.phase = Draining
		return []Action{{Kind: ActSweep}}
	}
	m.phase = Sweeping
	return []Action{{Kind: ActTermOrphans}}
}

// onStop begins to stop for c, unless the attempt already stops; once every worker has exited, a stop signal ends
// the wait for what they left and bounds the wait for a reader of the output (see Hurry), and while draining it drops
// the output that waits for a reader.
func (m *Machine) onStop(c *Cause) []Action {
	switch {
	case m.phase <= Running:
	case m.phase == Sweeping && c.Reason == StopSignal: // no need to wait for what the workers left, nor long for a reader
		m.phase = Draining
		return []Action{{Kind: ActSweep}, {Kind: ActHurry}}
	case m.phase == Draining && c.Reason == StopSignal:
		return []Action{{Kind: ActAbandon}}
	default:
		return nil // the first cause decides; a later one changes nothing here
	}
	m.cause, m.stopSig = c, c.Signal
	m.phase = Stopping
	var acts []Action
	if c.Reason == StopFailure {
		acts = append(acts, Action{Kind: ActFailed, Cause: c})
	}
	if c.Announced() {
		acts = append(acts, Action{Kind: ActAnnounce, Cause: c})
	}
	return append(acts, Action{Kind: ActSignal, Signal: c.Signal, Cause: c}, Action{Kind: ActArmGrace})
}

// onSecondStop kills at once: the same stop signal again, any once the grace has begun, or the timeout then.
func (m *Machine) onSecondStop(sig syscall.Signal, why string) []Action {
	switch m.phase {
	case Starting, Running:
		if sig == 0 {
			return nil // the timeout stops a running attempt as any cause does (EvStop)
		}
		m.cause, m.stopSig = SignalCause(sig), syscall.SIGKILL
		fallthrough
	case Stopping:
		m.phase, m.escalated = Killing, why
		return []Action{{Kind: ActKill}, {Kind: ActHurry}}
	case Killing:
		return []Action{{Kind: ActHurry}}
	case Sweeping:
		m.phase = Draining
		return []Action{{Kind: ActSweep}, {Kind: ActHurry}}
	case Draining:
		return []Action{{Kind: ActAbandon}}
	}
	return nil
}

// onGrace escalates: the groups still running get SIGKILL; what the workers left is swept.
func (m *Machine) onGrace() []Action {
	switch m.phase {
	case Stopping:
		m.phase, m.escalated = Killing, "grace "+m.grace+" expired"
		return []Action{{Kind: ActKill}}
	case Sweeping:
		m.phase = Draining
		return []Action{{Kind: ActSweep}}
	}
	return nil
}

// GraceBegan reports whether a stop signal now is a second stop: the attempt has begun to stop.
func (m *Machine) GraceBegan() bool {
	return m.phase >= Stopping && m.cause != nil
}

// StopReason says what ended an attempt (or a job): the first cause of its stop, or StopDone.
type StopReason string

// The reasons an attempt or a job ends (see docs/CONTROL.md).
const (
	StopDone     StopReason = "done"     // every worker exited on its own
	StopFailure  StopReason = "failure"  // a worker of this node failed; the rest were stopped
	StopStart    StopReason = "start"    // a worker could not be started; the rest were stopped
	StopSignal   StopReason = "signal"   // tpurun received a stop signal (SIGINT, SIGTERM, SIGQUIT)
	StopTimeout  StopReason = "timeout"  // --timeout expired
	StopCanceled StopReason = "canceled" // the caller's context was canceled
	StopOutput   StopReason = "output"   // writing tpurun's stdout or stderr failed
	StopRemote   StopReason = "remote"   // another node failed or stopped
	StopLost     StopReason = "lost"     // another node was lost
	StopStore    StopReason = "store"    // the rendezvous store was lost
	StopClosed   StopReason = "closed"   // the job was closed: it ended on the other nodes
)

// JobWide reports whether a stop for r ends the job: it is never restarted, and every wait of the run ends.
func (r StopReason) JobWide() bool {
	switch r {
	case StopSignal, StopTimeout, StopCanceled, StopOutput, StopStore, StopClosed:
		return true
	}
	return false
}

// Verdict is how an attempt, and then the whole job, ended: what ended it (the first cause), the exit code, and the
// root cause — a worker of this node, another node, or the signal, timeout or error that stopped it. It is made once,
// when the cause is known, and its Code is decided then; from there the code travels as a number (in the outcome every
// node publishes), never recomputed from an error. Run returns the job's verdict as its error (nil when the job
// succeeded); errors.As still finds the *proc.WorkerError, *failure.NodeError, *failure.SignalError or
// *failure.OutputError in it, and errors.Is the sentinels (failure.ErrTimeout, failure.ErrRendezvous,
// failure.ErrResults, context.Canceled).
type Verdict struct {
	Reason StopReason `json:"reason"`
	Code   int        `json:"code"`
	// Signal is the stop signal tpurun received (StopSignal).
	Signal syscall.Signal `json:"signal,omitempty"`
	// Failure is this node's first failed worker: the root cause of a StopFailure.
	Failure *proc.WorkerError `json:"failure,omitempty"`
	// Node is the node that decided the verdict (multi-host), or the node that failed or was lost.
	Node int `json:"node"`
	// Escalated says why SIGKILL was needed, "" when the workers ended without it: "grace 7s expired", "second
	// SIGTERM".
	Escalated string `json:"escalated,omitempty"`
	// During says what tpurun was doing when a stop came outside an attempt ("the rendezvous join").
	During string `json:"during,omitempty"`
	// Message is the cause in words where it is not derived from the fields above (an error, another node's).
	Message string `json:"message,omitempty"`
	// Err is the typed error behind the verdict, nil for a success.
	Err error `json:"-"`
}

// Error is the summary line of the verdict.
func (v *Verdict) Error() string { return v.Summary() }

// Unwrap exposes the typed error behind the verdict.
func (v *Verdict) Unwrap() error { return v.Err }

// ExitStatus is the exit code decided when the verdict was made (failure.ExitCode reads it).
func (v *Verdict) ExitStatus() int { return v.Code }

// Own reports whether the verdict is this node's own, not a stop because of another node (StopRemote, StopLost).
func (v *Verdict) Own() bool { return v.Reason != StopRemote && v.Reason != StopLost }

// OK reports whether the verdict is a success (exit code 0).
func (v *Verdict) OK() bool { return v == nil || v.Code == 0 }

// Summary is the verdict in one line: "stopped by SIGTERM; grace 7s expired, SIGKILL needed",
// "rank 1 (pid 42, attempt 0) exited with code 1 after 2s", "every worker exited 0".
func (v *Verdict) Summary() string {
	var s string
	switch {
	case v.Reason == StopSignal:
		s = "stopped by " + failure.SignalName(v.Signal)
		if v.During != "" {
			s += " during " + v.During
		}
	case v.Failure != nil && v.Reason == StopFailure:
		s = v.Failure.Error()
	case v.Err != nil:
		s = v.Err.Error()
	case v.Message != "":
		s = v.Message
	default:
		s = "every worker exited 0"
	}
	if v.Escalated != "" {
		s += "; " + v.Escalated + ", SIGKILL needed"
	}
	return s
}

// Cause is one reason to stop, as the launcher's stop controller and an attempt's Machine act on it; a verdict is
// made from the first one.
type Cause struct {
	Reason  StopReason
	Signal  syscall.Signal    // the signal the workers get: the stop signal tpurun received, else SIGTERM
	Err     error             // the typed error behind it (an output error, a start error, a rendezvous error)
	Failure *proc.WorkerError // StopFailure
	Node    int               // StopRemote, StopLost: the node; -1 none
	Message string            // StopRemote: the other node's words
	// SkipGroup is a worker process group that already got Signal (from the terminal): it is not sent again.
	SkipGroup int
}

// Announced reports whether the other nodes are told of this cause: it is this node's own stop (theirs they know).
func (c *Cause) Announced() bool {
	return c.Reason != StopRemote && c.Reason != StopLost && c.Reason != StopClosed
}

func (c *Cause) String() string {
	switch c.Reason {
	case StopSignal:
		return "received " + failure.SignalName(c.Signal)
	case StopFailure:
		return c.Failure.Error()
	case StopRemote:
		return fmt.Sprintf("node %d failed or stopped: %s", c.Node, c.Message)
	}
	if c.Err != nil {
		return c.Err.Error()
	}
	return string(c.Reason)
}

// SignalCause is the cause of a stop signal tpurun received.
func SignalCause(s syscall.Signal) *Cause {
	return &Cause{Reason: StopSignal, Signal: s, Node: -1}
}

// FailureCause is the cause of a worker of this node that failed.
func FailureCause(we *proc.WorkerError) *Cause {
	return &Cause{Reason: StopFailure, Signal: syscall.SIGTERM, Failure: we, Node: -1}
}

// ErrCause is a cause for r with the error behind it.
func ErrCause(r StopReason, err error) *Cause {
	return &Cause{Reason: r, Signal: syscall.SIGTERM, Err: err, Node: -1}
}

// verdict is the verdict of an attempt (number n) that ended for c (nil: every worker ended on its own), with
// escalated saying why SIGKILL was needed.
func (c *Cause) verdict(n int, timeout time.Duration, escalated string) *Verdict {
	if c == nil {
		return &Verdict{Reason: StopDone, Node: -1}
	}
	v := &Verdict{Reason: c.Reason, Signal: c.Signal, Node: c.Node, Escalated: escalated, Err: c.Err}
	switch c.Reason {
	case StopSignal:
		v.Err = &failure.SignalError{Signal: c.Signal, During: "attempt " + fmt.Sprint(n)}
		v.Code = failure.ExitSignal(c.Signal)
	case StopFailure:
		v.Signal, v.Failure, v.Err = 0, c.Failure, c.Failure
		v.Code = c.Failure.ExitStatus()
	case StopTimeout:
		v.Signal = 0
		v.Err = fmt.Errorf("%w: the timeout %s expired in attempt %d; raise it or find the hung rank", failure.ErrTimeout, timeout, n)
		v.Code = failure.ExitTimeout
	case StopRemote:
		v.Signal, v.Message = 0, c.Message
		v.Err = &failure.NodeError{Node: c.Node, Code: failure.ExitRendezvous, Message: c.Message}
		v.Code = failure.ExitRendezvous // until the world's verdict names the node's code
	default:
		v.Signal = 0
		v.Code = failure.ExitCode(c.Err)
	}
	return v
}

// VerdictDuring is the verdict of a job-wide cause that stopped the job outside an attempt, during what it was
// doing ("the rendezvous join").
func (c *Cause) VerdictDuring(during string, timeout time.Duration) *Verdict {
	v := c.verdict(0, timeout, "")
	v.During = during
	switch c.Reason {
	case StopSignal:
		v.Err = &failure.SignalError{Signal: c.Signal, During: during}
	case StopTimeout:
		v.Err = fmt.Errorf("%w: the timeout %s expired during %s", failure.ErrTimeout, timeout, during)
	}
	return v
}

// Attempt is one start of the whole group (attempt 0, then one per restart).
type Attempt struct {
	Number  int
	Verdict *Verdict      // how this attempt ended (its reason, exit code, root cause)
	Ranks   []RankSummary // in local-rank order
	Swept   []int         // pids the orphan sweep had to kill
	LogDir  string        // DIR/<run-id>_<random>/attempt_<n>, "" without --log-dir

	EndOrder []int // ranks in the order their processes ended (for the results document's exit code)
}

// RankSummary is one worker of one attempt: how its process ended (the Exit: PID, ExitCode, Signal, Wall and the
// resource usage from wait4's rusage; Ended says it as text) and what the launcher saw of it.
type RankSummary struct {
	Rank, LocalRank int
	proc.Exit
	Sampled    Sample // last live sample (gopsutil)
	StderrTail []string
	// TailHasStdout says that StderrTail holds the worker's stdout too: its stdout and stderr were one stream,
	// in the order it wrote them (see Runner's oneStream).
	TailHasStdout bool
	ErrorFile     string
	Error         *ErrorRecord // parsed ErrorFile, nil if the worker wrote none
	ResultErr     error        // from the result sink
}

// Failed is the summary of the rank whose failure ended the attempt, nil when no worker's failure did.
func (a *Attempt) Failed() *RankSummary {
	v := a.Verdict
	if v == nil || v.Reason != StopFailure || v.Failure == nil {
		return nil
	}
	for i, s := range a.Ranks {
		if s.Rank == v.Failure.Rank {
			return &a.Ranks[i]
		}
	}
	return nil
}

// ResultExits is how each rank of a ended, in the order the processes ended (ranks that never ended, e.g. never
// started, follow in rank order), as results.Collector.Finish wants it: the exit status, or 128+N and the
// signal's name for a rank killed by signal N.
func (a *Attempt) ResultExits() []results.RankExit {
	byRank := make(map[int]RankSummary, len(a.Ranks))
	for _, s := range a.Ranks {
		byRank[s.Rank] = s
	}
	out := make([]results.RankExit, 0, len(a.Ranks))
	seen := make(map[int]bool, len(a.Ranks))
	add := func(s RankSummary) {
		seen[s.Rank] = true
		out = append(out, s.resultExit())
	}
	for _, rank := range a.EndOrder {
		if s, ok := byRank[rank]; ok && !seen[rank] {
			add(s)
		}
	}
	for _, s := range a.Ranks {
		if !seen[s.Rank] {
			add(s)
		}
	}
	return out
}

// resultExit is how the rank ended, for the results document.
func (s RankSummary) resultExit() results.RankExit { return results.ExitOf(s.Rank, s.Exit) }

// Sink receives each worker's private result channel (the read end of the pipe that is the worker's fd 3).
// Consume is called once per started worker, from its own goroutine, and must return when r returns an error
// (including os.ErrDeadlineExceeded once the launcher stops draining). A returned error is recorded in the
// report as a *failure.ResultError and makes the run fail with failure.ErrResults. A nil sink drains and discards.
type Sink interface {
	Consume(rank, pid int, replicas []int, r io.Reader) error
}

// readResults reads the worker's result channel into the sink (or discards it without one). A violation of the
// result contract is the collector's to report (its document names each one, with a hint, and decides the exit
// code); only a sink's other failures are this rank's.
func readResults(sink Sink, wk *child, pid int) {
	res := wk.drain.Reader(wk.readers[2])
	if sink == nil {
		_, _ = io.Copy(io.Discard, res)
		return
	}
	var violation *results.ContractError
	err := sink.Consume(wk.w.Rank, pid, wk.w.Replicas, res)
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.As(err, &violation) {
		wk.resErr = err
	}
}
