package spec

import (
	"strconv"
	"time"
	"tpurun/internal/attempt"
	"tpurun/internal/proc"
	"tpurun/internal/results"
	"tpurun/internal/stop"
)

// Observer learns of a job's progress: the status endpoint, function-mode bookkeeping, metrics. Observe is called
// from the supervisor and the result readers and must not block.
type Observer interface {
	Observe(Event)
}

// EventKind says what happened.
type EventKind int

// The events a job reports.
const (
	// AttemptStarted: attempt (generation) Attempt begins, before its workers start; 0 first, n > 0 after a restart.
	AttemptStarted EventKind = iota + 1
	// WorkerFailed: Failure is the first failed worker of the attempt, reported before the others are stopped.
	WorkerFailed
	// Sampled: Samples are the live workers' last RSS/CPU samples.
	Sampled
	// ResultReceived: one result was accepted from a worker.
	ResultReceived
	// RendezvousDone: the join of a generation took Rendezvous. Only where nodes meet: a world of one (a single
	// host) does not rendezvous, and reports none.
	RendezvousDone
	// AttemptEnded: Ended is the attempt that just ended, the last of Report.Attempts (its summary can be
	// printed now, before a restart runs the next one).
	AttemptEnded
)

// eventNames are the kinds' names, as the constants spell them.
var eventNames = [...]string{AttemptStarted: "AttemptStarted", WorkerFailed: "WorkerFailed", Sampled: "Sampled",
	ResultReceived: "ResultReceived", RendezvousDone: "RendezvousDone", AttemptEnded: "AttemptEnded"}

// String is the kind's name ("AttemptEnded"), so that an Observer printing an Event shows what happened, not a
// number; a kind this build does not know is "EventKind(N)".
func (k EventKind) String() string {
	if k > 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event is one thing that happened in a job; the fields that its Kind names are set.
type Event struct {
	Kind       EventKind
	Attempt    int
	Failure    *proc.WorkerError
	Samples    []attempt.Sample
	Rendezvous time.Duration
	Ended      *attempt.Attempt
	Report     *Report
}

// Observers fans an event out to every observer of a Spec.
type Observers []Observer

// Emit gives e to every observer, in order.
func (os Observers) Emit(e Event) {
	for _, o := range os {
		o.Observe(e)
	}
}

// Report is what happened in a job: every attempt (generation) of this node's workers and every rank, the job's
// verdict, and on node 0 (or a single host) the results document of the world's last attempt.
type Report struct {
	RunID    string
	Program  []string // the command every worker ran (the interpreter first for a Python program)
	Attempts []*attempt.Attempt
	Results  *results.Document
	Verdict  *stop.Verdict // how the job ended; never nil once Run returns a report
}

// Last is the final attempt, nil before any.
func (r *Report) Last() *attempt.Attempt {
	if len(r.Attempts) == 0 {
		return nil
	}
	return r.Attempts[len(r.Attempts)-1]
}
