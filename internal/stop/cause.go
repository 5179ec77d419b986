package stop

import (
	"fmt"
	"syscall"
	"time"
	"tpurun/internal/failure"
	"tpurun/internal/proc"
)

// Reason says what ended an attempt (or a job): the first cause of its stop, or Done.
type Reason string

// The reasons an attempt or a job ends (see docs/CONTROL.md).
const (
	Done     Reason = "done"     // every worker exited on its own
	Failure  Reason = "failure"  // a worker of this node failed; the rest were stopped
	Start    Reason = "start"    // a worker could not be started; the rest were stopped
	Signal   Reason = "signal"   // tpurun received a stop signal (SIGINT, SIGTERM, SIGQUIT)
	Timeout  Reason = "timeout"  // --timeout expired
	Canceled Reason = "canceled" // the caller's context was canceled
	Output   Reason = "output"   // writing tpurun's stdout or stderr failed
	Remote   Reason = "remote"   // another node failed or stopped
	Lost     Reason = "lost"     // another node was lost
	Store    Reason = "store"    // the rendezvous store was lost
	Closed   Reason = "closed"   // the job was closed: it ended on the other nodes
)

// JobWide reports whether a stop for r ends the job: it is never restarted, and every wait of the run ends.
func (r Reason) JobWide() bool {
	switch r {
	case Signal, Timeout, Canceled, Output, Store, Closed:
		return true
	}
	return false
}

// Own reports whether r is this node's own stop, not one because of another node (Remote, Lost): the other nodes
// are told of it (theirs they know).
func (r Reason) Own() bool { return r != Remote && r != Lost }

// Cause is one reason to stop, as the launcher's stop controller and an attempt's Machine act on it; a verdict is
// made from the first one.
type Cause struct {
	Reason  Reason
	Signal  syscall.Signal    // the signal the workers get: the stop signal tpurun received, else SIGTERM
	Err     error             // the typed error behind it (an output error, a start error, a rendezvous error, Failure)
	Failure *proc.WorkerError // Failure
	Node    int               // Remote, Lost: the node; -1 none
	Message string            // Remote: the other node's words
}

func (c *Cause) String() string {
	switch c.Reason {
	case Signal:
		return "received " + failure.SignalName(c.Signal)
	case Remote:
		return fmt.Sprintf("node %d failed or stopped: %s", c.Node, c.Message)
	}
	if c.Err != nil {
		return c.Err.Error()
	}
	return string(c.Reason)
}

// SignalCause is the cause of a stop signal tpurun received.
func SignalCause(s syscall.Signal) *Cause {
	return &Cause{Reason: Signal, Signal: s, Node: -1}
}

// FailureCause is the cause of a worker of this node that failed.
func FailureCause(we *proc.WorkerError) *Cause {
	return &Cause{Reason: Failure, Signal: syscall.SIGTERM, Err: we, Failure: we, Node: -1}
}

// ErrCause is a cause for r with the error behind it.
func ErrCause(r Reason, err error) *Cause {
	return &Cause{Reason: r, Signal: syscall.SIGTERM, Err: err, Node: -1}
}

// Verdict is the verdict of an attempt (number n) that ended for c (nil: every worker ended on its own), with
// escalated saying why SIGKILL was needed.
func (c *Cause) Verdict(n int, timeout time.Duration, escalated string) *Verdict {
	if c == nil {
		return &Verdict{Reason: Done, Node: -1}
	}
	v := &Verdict{Reason: c.Reason, Node: c.Node, Escalated: escalated, Err: c.Err}
	switch c.Reason {
	case Signal:
		v.Signal = c.Signal
		v.Err = &failure.SignalError{Signal: c.Signal, During: "attempt " + fmt.Sprint(n)}
	case Failure:
		v.Failure = c.Failure
	case Timeout:
		v.Err = fmt.Errorf("%w: the timeout %s expired in attempt %d; raise it or find the hung rank", failure.ErrTimeout, timeout, n)
	case Remote: // its code is ExitRendezvous until the world's verdict names the node's
		v.Message = c.Message
		v.Err = &failure.NodeError{Node: c.Node, Code: failure.ExitRendezvous, Message: c.Message}
	}
	v.Code = failure.ExitCode(v.Err)
	return v
}

// VerdictDuring is the verdict of a job-wide cause that stopped the job outside an attempt, during what it was
// doing ("the rendezvous join").
func (c *Cause) VerdictDuring(during string, timeout time.Duration) *Verdict {
	v := c.Verdict(0, timeout, "")
	v.During = during
	switch c.Reason {
	case Signal:
		v.Err = &failure.SignalError{Signal: c.Signal, During: during}
	case Timeout:
		v.Err = fmt.Errorf("%w: the timeout %s expired during %s", failure.ErrTimeout, timeout, during)
	}
	return v
}

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
