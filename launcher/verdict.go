package launcher

import (
	"context"
	"errors"

	"tpurun/internal/attempt"
	"tpurun/internal/failure"
	"tpurun/rendezvous"
)

// verdictOf is the verdict of an error that ended a job outside an attempt (a join that failed, a start that
// never happened): a verdict already is one; anything else is wrapped with the code it maps to.
func verdictOf(err error) *attempt.Verdict {
	if err == nil {
		return nil
	}
	var v *attempt.Verdict
	if errors.As(err, &v) {
		return v
	}
	return &attempt.Verdict{Reason: reasonOf(err), Code: failure.ExitCode(err), Node: -1, Err: err}
}

// reasonOf names the stop reason of an error that ended a job outside an attempt.
func reasonOf(err error) attempt.StopReason {
	var se *failure.SignalError
	switch {
	case errors.As(err, &se):
		return attempt.StopSignal
	case errors.Is(err, failure.ErrTimeout):
		return attempt.StopTimeout
	case errors.Is(err, context.Canceled):
		return attempt.StopCanceled
	case errors.Is(err, rendezvous.ErrNodeLost):
		return attempt.StopLost
	}
	return attempt.StopDone
}
