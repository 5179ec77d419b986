package stop

import (
	"syscall"
	"tpurun/internal/failure"
	"tpurun/internal/proc"
)

// Verdict is how an attempt, and then the whole job, ended: what ended it (the first cause), the exit code, and the
// root cause. Its Code is decided once, when it is made, and travels as a number (in every node's outcome), never
// recomputed from an error. Run returns the job's verdict as its error; errors.As and errors.Is find the typed
// errors and sentinels behind it (*proc.WorkerError, *failure.NodeError, failure.ErrTimeout, context.Canceled, ...).
type Verdict struct {
	Reason Reason `json:"reason"`
	Code   int    `json:"code"`
	// Signal is the stop signal tpurun received (Signal).
	Signal syscall.Signal `json:"signal,omitempty"`
	// Failure is this node's first failed worker: the root cause of a Failure.
	Failure *proc.WorkerError `json:"failure,omitempty"`
	// Node is the node that decided the verdict (multi-host), or the node that failed or was lost.
	Node int `json:"node"`
	// Escalated says why SIGKILL was needed ("grace 7s expired", "second SIGTERM"), "" when it was not.
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

// OK reports whether the verdict is a success (exit code 0).
func (v *Verdict) OK() bool { return v == nil || v.Code == 0 }

// Summary is the verdict in one line: "stopped by SIGTERM; grace 7s expired, SIGKILL needed",
// "rank 1 (pid 42, attempt 0) exited with code 1 after 2s", "every worker exited 0".
func (v *Verdict) Summary() string {
	var s string
	switch {
	case v.Reason == Signal:
		s = "stopped by " + failure.SignalName(v.Signal)
		if v.During != "" {
			s += " during " + v.During
		}
	case v.Failure != nil && v.Reason == Failure:
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
