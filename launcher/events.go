package launcher

import (
	"time"

	"tpurun/internal/spec"
)

// Observer learns of a job's progress: a status endpoint, bookkeeping, metrics. Observe is called from the
// launcher's own goroutines, one event at a time, and must not block.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// EventKind says what happened.
type EventKind int

// The events a job reports, in the order a job meets them.
const (
	// AttemptStarted: attempt Attempt begins, before its workers start; 0 first, n > 0 after a restart.
	AttemptStarted EventKind = iota + 1
	// WorkerFailed: Failure is the first failed worker of the attempt, reported before the others are stopped.
	WorkerFailed
	// Sampled: Samples are the live workers' last RSS/CPU samples (every Spec.SampleInterval).
	Sampled
	// ResultReceived: one result was accepted from a worker.
	ResultReceived
	// RendezvousDone: the join of a generation took Rendezvous; only where nodes meet (not in a world of one).
	RendezvousDone
	// AttemptEnded: Ended is the attempt that just ended, before a restart runs the next one.
	AttemptEnded
)

// String is the kind's name ("AttemptEnded"); a kind this version does not know is "EventKind(N)". The names are
// the launcher's inside's, whose kinds these are, value for value (TestEventKindsAgree).
func (k EventKind) String() string { return spec.EventKind(k).String() }

// Event is one thing that happened in a job; the fields its Kind names are set.
type Event struct {
	Kind       EventKind
	Attempt    int           // the attempt's number
	Failure    *WorkerError  // WorkerFailed
	Samples    []Sample      // Sampled
	Rendezvous time.Duration // RendezvousDone
	Ended      *Attempt      // AttemptEnded
}

// observers adapts a Spec's public observers to the launcher's events.
type observers []Observer

// Observe gives every observer the public copy of e.
func (os observers) Observe(e spec.Event) {
	pe := Event{Kind: EventKind(e.Kind), Attempt: e.Attempt, Failure: workerErrorOf(e.Failure),
		Rendezvous: e.Rendezvous, Ended: attemptOf(e.Ended)}
	if e.Samples != nil {
		pe.Samples = samplesOf(e.Samples)
	}
	for _, o := range os {
		o.Observe(pe)
	}
}
