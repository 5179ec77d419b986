package results

import (
	"errors"
	"fmt"
)

// The violations of the result contract. Every violation is a *ContractError wrapping one of these.
var (
	ErrDuplicateResult = errors.New("duplicate result")
	ErrForeignReplica  = errors.New("result for a foreign replica")
	ErrMissingResult   = errors.New("missing result")
	ErrOversizedFrame  = errors.New("oversized result frame")
	ErrMalformedFrame  = errors.New("malformed result frame")
	ErrTruncatedFrame  = errors.New("truncated result frame")
	ErrUnknownVersion  = errors.New("unknown result protocol version")
)

// kinds maps each sentinel to its name in the document.
var kinds = []struct {
	err  error
	name string
}{
	{ErrDuplicateResult, "duplicate_result"},
	{ErrForeignReplica, "foreign_replica"},
	{ErrMissingResult, "missing_result"},
	{ErrOversizedFrame, "oversized_frame"},
	{ErrMalformedFrame, "malformed_frame"},
	{ErrTruncatedFrame, "truncated_frame"},
	{ErrUnknownVersion, "unknown_version"},
}

// ContractError is one violation with its facts. Replica is -1 when the frame's replica was unreadable; OtherRank
// and OtherPID are the second reporter of a duplicate (-1 otherwise).
type ContractError struct {
	Kind      error // one of the sentinels above
	Replica   int
	Rank      int
	PID       int
	OtherRank int
	OtherPID  int
	Message   string // the full sentence, naming replica, ranks and pids
	Hint      string // the usual cause and what to do
	Cause     error  // the decoding error, when there is one
}

func (e *ContractError) Error() string {
	if e.Hint == "" {
		return e.Message
	}
	return e.Message + " (hint: " + e.Hint + ")"
}

// Unwrap exposes both the sentinel and the underlying cause to errors.Is/As.
func (e *ContractError) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Kind, e.Cause}
	}
	return []error{e.Kind}
}

// KindName is the violation's kind as written in the document ("duplicate_result", ...).
func (e *ContractError) KindName() string {
	for _, k := range kinds {
		if e.Kind == k.err {
			return k.name
		}
	}
	return fmt.Sprint(e.Kind)
}

// violation is e as the document lists it.
func (e *ContractError) violation() Violation {
	return Violation{Kind: e.KindName(), Message: e.Message, Replica: e.Replica, Rank: e.Rank, PID: e.PID, Hint: e.Hint}
}

// The hints: the usual cause of each violation and what to do about it.
const (
	hintDuplicateRanks = "several processes reported the same replica: usually every process sees device 0, " +
		"because SPMD (XLA_USE_SPMD=1) runs with several processes per host (use one process per host, nprocs 1, in SPMD mode) or " +
		"because a device was initialized in the parent before spawning, so every child inherited it (do not " +
		"touch the device before tpurun starts the workers); a worker must report only the replicas in TPURUN_REPLICAS"
	hintDuplicateSelf = "one process reported the same replica twice: report each replica in TPURUN_REPLICAS " +
		"exactly once (look for a retry or a second call of report)"
	hintForeign = "a worker may only report the replicas listed in its TPURUN_REPLICAS: take the replica from " +
		"worker.Replicas() / tpurun.replicas(), not from a hard-coded or locally computed ordinal"
	hintMissing = "the worker exited 0 without reporting: in function mode the function's return value is reported " +
		"for you; a program whose results are expected must call worker.Report / tpurun.report for every replica " +
		"in TPURUN_REPLICAS before it exits"
	hintOversized = "raise the result size limit (max result bytes), or return something smaller (write large outputs to a file and " +
		"return its path)"
	hintMalformed = "something other than the tpurun client wrote to the result descriptor (TPURUN_RESULT_FD): " +
		"a library printing to fd 3, or a program that inherited the descriptor; write results only through " +
		"worker.Report / tpurun.report"
	hintHugeInteger = "Python's json refuses integers of more than 4300 digits, so the results document would not " +
		"load in tpurun.spawn or any Python reader: report the value as a string, or pickled (tpurun.report does " +
		"so itself)"
	hintTruncated = "the worker died in the middle of writing a result, or several threads wrote to the " +
		"descriptor without a lock; use one tpurun client per process (it writes each frame whole)"
	hintVersion = "the worker's tpurun client (Go module or Python package) is from another tpurun release: " +
		"use the Python module this binary installs (tpurun puts it on PYTHONPATH) or rebuild the Go worker " +
		"against the same tpurun"
)

// kindOf is the sentinel of a violation kind's document name; a name this tpurun does not know (another
// release's) stays a violation under its own name.
func kindOf(name string) error {
	for _, k := range kinds {
		if k.name == name {
			return k.err
		}
	}
	return errors.New(name)
}
