package attempt

import (
	"fmt"
	"syscall"
	"tpurun/internal/proc"
	"tpurun/internal/stop"
)

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
	EvDrained                      // the SIGKILL sweep is over and every pipe was read to EOF
)

// Event is one event, with what its kind needs.
type Event struct {
	Kind   EventKind
	Failed *proc.WorkerError // EvExited: the worker failed
	Cause  *stop.Cause       // EvStop
	Signal syscall.Signal    // EvForward, EvSecondStop (the signal, 0 for the timeout)
	Why    string            // EvSecondStop: "second SIGTERM", "--timeout 5s expired"
}

// ActionKind is one thing the supervisor does for a transition.
type ActionKind int

// The actions of an attempt's transitions.
const (
	ActSignal      ActionKind = iota // Signal to every worker group, once per group
	ActSignalNew                     // Signal to the worker just added (the others got it already)
	ActKill                          // SIGKILL to every worker group
	ActArmGrace                      // start the grace timer (once per attempt)
	ActFailed                        // a worker failed: log it, tell the observers
	ActAnnounce                      // tell the other nodes (Cause)
	ActHurry                         // bound the wait for a slow reader of tpurun's output (a second stop; a stop once all exited)
	ActAbandon                       // drop what the consoles still hold (a stop signal while draining)
	ActTermOrphans                   // SIGTERM to what the workers left, not signalled yet; watch the subtree empty
	ActSweep                         // SIGKILL to every group and the subtree, then read every pipe to EOF (EvDrained)
	ActSettle                        // the attempt is over: wake whoever waits for it
)

// Action is one step the supervisor takes.
type Action struct {
	Kind   ActionKind
	Signal syscall.Signal
	Cause  *stop.Cause
}

// Machine is one attempt's state: a value with no process, timer or goroutine in it, so that every transition can
// be tested alone. Handle is the only place the phase changes; the supervisor feeds it events
// and carries out the actions it returns, in order.
type Machine struct {
	phase     Phase
	workers   int // started
	exited    int
	startDone bool
	cause     *stop.Cause    // the first cause to stop: it decides the verdict
	stopSig   syscall.Signal // what the groups got when the attempt began to stop
	escalated string         // why SIGKILL was needed
	grace     string         // the grace period in words, for escalated
}

// NewMachine is the machine of an attempt about to start, whose grace period (SIGTERM to SIGKILL) is grace.
func NewMachine(grace fmt.Stringer) *Machine {
	return &Machine{grace: grace.String()}
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
		acts = m.onStop(stop.FailureCause(failed))
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
func (m *Machine) onStop(c *stop.Cause) []Action {
	switch {
	case m.phase <= Running:
	case m.phase >= Sweeping && c.Reason == stop.Signal: // no need to wait for what the workers left, nor long for a reader
		return m.onSecondStop(c.Signal, "")
	default:
		return nil // the first cause decides; a later one changes nothing here
	}
	m.cause, m.stopSig = c, c.Signal
	m.phase = Stopping
	var acts []Action
	if c.Reason == stop.Failure {
		acts = append(acts, Action{Kind: ActFailed, Cause: c})
	}
	if c.Reason.Own() {
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
		m.cause, m.stopSig = stop.SignalCause(sig), syscall.SIGKILL
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
