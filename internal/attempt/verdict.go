package attempt

import (
	"fmt"
	"syscall"
	"time"

	"tpurun/internal/exitcode"
	"tpurun/internal/failure"
	"tpurun/internal/proc"
)

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
// succeeded); errors.As still finds the *failure.WorkerError, *failure.NodeError, *failure.SignalError or
// *failure.OutputError in it, and errors.Is the sentinels (failure.ErrTimeout, failure.ErrRendezvous,
// failure.ErrResults, context.Canceled).
type Verdict struct {
	Reason StopReason `json:"reason"`
	Code   int        `json:"code"`
	// Signal is the stop signal tpurun received (StopSignal).
	Signal syscall.Signal `json:"signal,omitempty"`
	// Failure is this node's first failed worker: the root cause of a StopFailure.
	Failure *failure.WorkerError `json:"failure,omitempty"`
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
		s = "stopped by " + proc.SignalName(v.Signal)
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
	Signal  syscall.Signal       // the signal the workers get: the stop signal tpurun received, else SIGTERM
	Err     error                // the typed error behind it (an output error, a start error, a rendezvous error)
	Failure *failure.WorkerError // StopFailure
	Node    int                  // StopRemote, StopLost: the node; -1 none
	Message string               // StopRemote: the other node's words
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
		return "received " + proc.SignalName(c.Signal)
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
func FailureCause(we *failure.WorkerError) *Cause {
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
		v.Code = exitcode.Signal(c.Signal)
	case StopFailure:
		v.Signal, v.Failure, v.Err = 0, c.Failure, c.Failure
		v.Code = c.Failure.ExitStatus()
	case StopTimeout:
		v.Signal = 0
		v.Err = fmt.Errorf("%w: the timeout %s expired in attempt %d; raise it or find the hung rank", failure.ErrTimeout, timeout, n)
		v.Code = exitcode.Timeout
	case StopRemote:
		v.Signal, v.Message = 0, c.Message
		v.Err = &failure.NodeError{Node: c.Node, Code: exitcode.Rendezvous, Message: c.Message}
		v.Code = exitcode.Rendezvous // until the world's verdict names the node's code
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
