package launcher

import (
	"fmt"
	"syscall"

	"tpurun/launcher/failure"
)

// phase is the state of one attempt of this node's workers (see docs/CONTROL.md).
type phase int

// The phases of an attempt, in the order it goes through them (it may skip some).
const (
	phaseStarting phase = iota // workers are being started
	phaseRunning               // every worker started, none asked to stop
	phaseStopping              // the stop signal went to every group; the grace timer runs
	phaseKilling               // SIGKILL went to every group
	phaseSweeping              // every worker exited; what they left gets a gentle signal and the rest of the grace
	phaseDraining              // SIGKILL to every group and the subtree, then every pipe read to EOF
	phaseDone                  // the attempt is over
)

var phaseNames = [...]string{"starting", "running", "stopping", "killing", "sweeping", "draining", "done"}

func (p phase) String() string { return phaseNames[p] }

// evKind is what happens to an attempt.
type evKind int

// The events of an attempt.
const (
	evAdded       evKind = iota // a worker was started
	evStarted                   // the start of workers is over (all, or as many as it got to)
	evExited                    // a worker exited; failed says whether it failed
	evStop                      // a cause to stop (the first one decides the verdict)
	evSecondStop                // a second stop signal, or the timeout once the grace began: SIGKILL now
	evForward                   // a signal to pass to every worker group
	evGrace                     // the grace period expired
	evOrphansGone               // nothing the workers left is alive any more
	evSwept                     // SIGKILL went to every group and the subtree sweep is over
	evDrained                   // every pipe was read to EOF
)

// event is one event, with what its kind needs.
type event struct {
	kind   evKind
	failed *failure.WorkerError // evExited: the worker failed
	cause  *cause               // evStop
	sig    syscall.Signal       // evForward, evSecondStop (the signal, 0 for the timeout)
	why    string               // evSecondStop: "second SIGTERM", "--timeout 5s expired"
}

// actKind is one thing the supervisor does for a transition.
type actKind int

// The actions of an attempt's transitions.
const (
	actSignal      actKind = iota // sig to every worker group (but cause.skipGroup), once per group
	actSignalNew                  // sig to the worker just added (the others got it already)
	actKill                       // SIGKILL to every worker group
	actArmGrace                   // start the grace timer (once per attempt)
	actFailed                     // a worker failed: log it, tell the observers
	actAnnounce                   // tell the other nodes (cause)
	actHurry                      // bound the wait for a slow reader of tpurun's output (second stop)
	actAbandon                    // drop what the consoles still hold (a stop signal while draining)
	actTermOrphans                // SIGTERM to what the workers left, not signalled yet; watch the subtree empty
	actSweep                      // SIGKILL to every group and the subtree (then evSwept)
	actDrain                      // read every pipe to EOF (then evDrained)
	actSettle                     // the attempt is over: wake whoever waits for it
)

// action is one step the supervisor takes.
type action struct {
	kind  actKind
	sig   syscall.Signal
	cause *cause
}

// attemptMachine is one attempt's state: a value with no process, timer or goroutine in it, so that every
// transition can be tested alone (machine_test.go). handle is the only place the phase changes; the supervisor
// feeds it events and carries out the actions it returns, in order.
type attemptMachine struct {
	phase     phase
	workers   int // started
	exited    int
	startDone bool
	cause     *cause         // the first cause to stop: it decides the verdict
	stopSig   syscall.Signal // what the groups got when the attempt began to stop
	escalated string         // why SIGKILL was needed
	grace     string         // the grace period in words, for escalated
}

func newMachine(grace fmt.Stringer) *attemptMachine {
	return &attemptMachine{grace: grace.String()}
}

// handle applies e and returns what to do, in order.
func (m *attemptMachine) handle(e event) []action {
	switch e.kind {
	case evAdded:
		return m.onAdded()
	case evStarted:
		return m.onStarted()
	case evExited:
		return m.onExited(e.failed)
	case evStop:
		return m.onStop(e.cause)
	case evSecondStop:
		return m.onSecondStop(e.sig, e.why)
	case evForward:
		if m.phase <= phaseKilling {
			return []action{{kind: actSignal, sig: e.sig}}
		}
	case evGrace:
		return m.onGrace()
	default:
		return m.onEnding(e.kind)
	}
	return nil
}

// onStarted: no more workers will start; the attempt runs, or is over already.
func (m *attemptMachine) onStarted() []action {
	m.startDone = true
	if m.phase == phaseStarting {
		m.phase = phaseRunning
	}
	return m.maybeAllExited()
}

// onEnding takes the events of the end: nothing left alive, the SIGKILL sweep over, the pipes drained.
func (m *attemptMachine) onEnding(k evKind) []action {
	switch {
	case k == evOrphansGone && m.phase == phaseSweeping:
		m.phase = phaseDraining
		return []action{{kind: actSweep}}
	case k == evSwept && m.phase == phaseDraining:
		return []action{{kind: actDrain}}
	case k == evDrained && m.phase == phaseDraining:
		m.phase = phaseDone
		return []action{{kind: actSettle}}
	}
	return nil
}

// onAdded counts a started worker; one started while the attempt stops gets what the others got.
func (m *attemptMachine) onAdded() []action {
	m.workers++
	switch m.phase {
	case phaseStopping:
		return []action{{kind: actSignalNew, sig: m.stopSig}}
	case phaseKilling:
		return []action{{kind: actSignalNew, sig: syscall.SIGKILL}}
	}
	return nil
}

// onExited counts an exit; the first failure while nothing stops the attempt is its cause.
func (m *attemptMachine) onExited(failed *failure.WorkerError) []action {
	m.exited++
	var acts []action
	if failed != nil && m.phase <= phaseRunning {
		acts = m.onStop(failureCause(failed))
	}
	return append(acts, m.maybeAllExited()...)
}

// maybeAllExited moves on once every started worker has exited and no more will start.
func (m *attemptMachine) maybeAllExited() []action {
	if !m.startDone || m.exited < m.workers || m.phase > phaseKilling {
		return nil
	}
	if m.phase == phaseKilling { // the grace is over: no gentle step for what they left
		m.phase = phaseDraining
		return []action{{kind: actSweep}}
	}
	m.phase = phaseSweeping
	return []action{{kind: actTermOrphans}}
}

// onStop begins to stop for c, unless the attempt already stops; a stop signal while draining drops the output
// that waits for a reader.
func (m *attemptMachine) onStop(c *cause) []action {
	switch {
	case m.phase <= phaseRunning:
	case m.phase == phaseSweeping && c.reason == StopSignal: // no need to wait for what the workers left
		m.phase = phaseDraining
		return []action{{kind: actSweep}}
	case m.phase == phaseDraining && c.reason == StopSignal:
		return []action{{kind: actAbandon}}
	default:
		return nil // the first cause decides; a later one changes nothing here
	}
	m.cause, m.stopSig = c, c.sig
	m.phase = phaseStopping
	var acts []action
	if c.reason == StopFailure {
		acts = append(acts, action{kind: actFailed, cause: c})
	}
	if c.announced() {
		acts = append(acts, action{kind: actAnnounce, cause: c})
	}
	return append(acts, action{kind: actSignal, sig: c.sig, cause: c}, action{kind: actArmGrace})
}

// onSecondStop kills at once: the same stop signal again, any once the grace has begun, or the timeout then.
func (m *attemptMachine) onSecondStop(sig syscall.Signal, why string) []action {
	switch m.phase {
	case phaseStarting, phaseRunning:
		if sig == 0 {
			return nil // the timeout stops a running attempt as any cause does (evStop)
		}
		m.cause, m.stopSig = signalCause(sig), syscall.SIGKILL
		fallthrough
	case phaseStopping:
		m.phase, m.escalated = phaseKilling, why
		return []action{{kind: actKill}, {kind: actHurry}}
	case phaseKilling:
		return []action{{kind: actHurry}}
	case phaseSweeping:
		m.phase = phaseDraining
		return []action{{kind: actSweep}, {kind: actHurry}}
	case phaseDraining:
		return []action{{kind: actAbandon}}
	}
	return nil
}

// onGrace escalates: the groups still running get SIGKILL; what the workers left is swept.
func (m *attemptMachine) onGrace() []action {
	switch m.phase {
	case phaseStopping:
		m.phase, m.escalated = phaseKilling, "grace "+m.grace+" expired"
		return []action{{kind: actKill}}
	case phaseSweeping:
		m.phase = phaseDraining
		return []action{{kind: actSweep}}
	}
	return nil
}

// graceBegan reports whether a stop signal now is a second stop: the attempt has begun to stop.
func (m *attemptMachine) graceBegan() bool {
	return m.phase >= phaseStopping && m.cause != nil
}
