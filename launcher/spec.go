package launcher

import (
	"tpurun/internal/attempt"
	"tpurun/internal/spec"
)

// What a caller gives Run: the Spec of a job and the option structs it holds.
type (
	Spec           = spec.Spec
	RendezvousSpec = spec.RendezvousSpec
	ResultsSpec    = spec.ResultsSpec
	FnSpec         = spec.FnSpec
)

// What Run reports: the Report of the job, each Attempt (generation) of this node's workers and each rank in it.
type (
	Report      = spec.Report
	Attempt     = attempt.Attempt
	RankSummary = attempt.RankSummary
	Sample      = attempt.Sample
	ErrorRecord = attempt.ErrorRecord
)

// What an Observer learns while the job runs.
type (
	Observer     = spec.Observer
	ObserverFunc = spec.ObserverFunc
	Event        = spec.Event
	EventKind    = spec.EventKind
)

// The kinds of Event (see spec.EventKind).
const (
	AttemptStarted = spec.AttemptStarted
	WorkerFailed   = spec.WorkerFailed
	Sampled        = spec.Sampled
	ResultReceived = spec.ResultReceived
	RendezvousDone = spec.RendezvousDone
	AttemptEnded   = spec.AttemptEnded
)
