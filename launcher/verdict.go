package launcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"tpurun/launcher/exitcode"
	"tpurun/launcher/failure"
	"tpurun/rendezvous"
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

// jobWide reports whether a stop for r ends the job: it is never restarted, and every wait of the run ends.
func (r StopReason) jobWide() bool {
	switch r {
	case StopSignal, StopTimeout, StopCanceled, StopOutput, StopStore, StopClosed:
		return true
	}
	return false
}

// Verdict is how an attempt, and then the whole job, ended: what ended it (the first cause), the exit code, and
// the root cause — a worker of this node, another node, or the signal, timeout or error that stopped it. It is
// made once, when the cause is known, and its Code is decided then; from there the code travels as a number (in
// the outcome every node publishes), never recomputed from an error. Run returns the job's verdict as its error
// (nil when the job succeeded); errors.As still finds the *failure.WorkerError, *failure.NodeError, *failure.SignalError or *failure.OutputError
// in it, and errors.Is the sentinels (failure.ErrTimeout, failure.ErrRendezvous, failure.ErrResults, context.Canceled).
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

// verdictOf is the verdict of an error that ended a job outside an attempt (a join that failed, a start that
// never happened): a verdict already is one; anything else is wrapped with the code it maps to.
func verdictOf(err error) *Verdict {
	if err == nil {
		return nil
	}
	var v *Verdict
	if errors.As(err, &v) {
		return v
	}
	return &Verdict{Reason: reasonOf(err), Code: failure.ExitCode(err), Node: -1, Err: err}
}

// reasonOf names the stop reason of an error that ended a job outside an attempt.
func reasonOf(err error) StopReason {
	var se *failure.SignalError
	switch {
	case errors.As(err, &se):
		return StopSignal
	case errors.Is(err, failure.ErrTimeout):
		return StopTimeout
	case errors.Is(err, context.Canceled):
		return StopCanceled
	case errors.Is(err, rendezvous.ErrNodeLost):
		return StopLost
	}
	return StopDone
}

// cause is one reason to stop, as the controller and an attempt's machine act on it; a verdict is made from the
// first one.
type cause struct {
	reason  StopReason
	sig     syscall.Signal       // the signal the workers get: the stop signal tpurun received, else SIGTERM
	err     error                // the typed error behind it (an output error, a start error, a rendezvous error)
	failure *failure.WorkerError // StopFailure
	node    int                  // StopRemote, StopLost: the node; -1 none
	msg     string               // StopRemote: the other node's words
	// skipGroup is a worker process group that already got sig (from the terminal): it is not sent again.
	skipGroup int
}

// announced reports whether the other nodes are told of this cause: it is this node's own stop (theirs they know).
func (c *cause) announced() bool {
	return c.reason != StopRemote && c.reason != StopLost && c.reason != StopClosed
}

func (c *cause) String() string {
	switch c.reason {
	case StopSignal:
		return "received " + failure.SignalName(c.sig)
	case StopFailure:
		return c.failure.Error()
	case StopRemote:
		return fmt.Sprintf("node %d failed or stopped: %s", c.node, c.msg)
	}
	if c.err != nil {
		return c.err.Error()
	}
	return string(c.reason)
}

func signalCause(s syscall.Signal) *cause {
	return &cause{reason: StopSignal, sig: s, node: -1}
}

func failureCause(we *failure.WorkerError) *cause {
	return &cause{reason: StopFailure, sig: syscall.SIGTERM, failure: we, node: -1}
}

func errCause(r StopReason, err error) *cause {
	return &cause{reason: r, sig: syscall.SIGTERM, err: err, node: -1}
}

// verdict is the verdict of an attempt (number n) that ended for c (nil: every worker ended on its own), with
// escalated saying why SIGKILL was needed.
func (c *cause) verdict(n int, timeout time.Duration, escalated string) *Verdict {
	if c == nil {
		return &Verdict{Reason: StopDone, Node: -1}
	}
	v := &Verdict{Reason: c.reason, Signal: c.sig, Node: c.node, Escalated: escalated, Err: c.err}
	switch c.reason {
	case StopSignal:
		v.Err = &failure.SignalError{Signal: c.sig, During: "attempt " + fmt.Sprint(n)}
		v.Code = exitcode.Signal(c.sig)
	case StopFailure:
		v.Signal, v.Failure, v.Err = 0, c.failure, c.failure
		v.Code = c.failure.ExitStatus()
	case StopTimeout:
		v.Signal = 0
		v.Err = fmt.Errorf("%w: the timeout %s expired in attempt %d; raise it or find the hung rank", failure.ErrTimeout, timeout, n)
		v.Code = exitcode.Timeout
	case StopRemote:
		v.Signal, v.Message = 0, c.msg
		v.Err = &failure.NodeError{Node: c.node, Code: exitcode.Rendezvous, Message: c.msg}
		v.Code = exitcode.Rendezvous // until the world's verdict names the node's code
	default:
		v.Signal = 0
		v.Code = failure.ExitCode(c.err)
	}
	return v
}

// cleanRanks lists the ranks that ended with exit code 0, for a stopped attempt's summary.
func cleanRanks(ranks []RankSummary) string {
	var ok []string
	for _, r := range ranks {
		if r.Signal == 0 && r.ExitCode == 0 {
			ok = append(ok, fmt.Sprint(r.Rank))
		}
	}
	switch len(ok) {
	case 0:
		return ""
	case len(ranks):
		return "every rank finished cleanly (exit 0)"
	case 1:
		return "rank " + ok[0] + " finished cleanly (exit 0)"
	}
	return "ranks " + strings.Join(ok, ", ") + " finished cleanly (exit 0)"
}
