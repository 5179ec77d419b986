package failure

import (
	"context"
	"errors"
	"syscall"
)

// ExitCode maps an error of a job (Run's, or the parsing of its Spec) to tpurun's exit code (a row of ExitTable):
// the code of the first error in its tree that carries one (an ExitStatus method: a Verdict's code, decided when the
// verdict was made, a worker's status, a signal's 128+N); for any other error, the code of its category, tested in
// this order: ErrNotFound 127, ErrNotExecutable 126, ErrConfig 2, ErrTimeout 124, ErrResults 65, ErrReplicaError 1,
// ErrRendezvous 69, a caller's context.Canceled 143 (as SIGTERM), a caller's context.DeadlineExceeded 124 (as
// --timeout); anything else is 70 (ErrInternal). ExitCode(nil) is 0.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var c interface{ ExitStatus() int }
	if errors.As(err, &c) {
		return c.ExitStatus()
	}
	for _, s := range categoryCodes {
		if errors.Is(err, s.category) {
			return s.code
		}
	}
	return ExitInternal
}

// categoryCodes maps the categories to their codes, in the order they are tested.
var categoryCodes = []struct {
	category error
	code     int
}{
	{ErrNotFound, ExitNotFound}, {ErrNotExecutable, ExitNotExecutable}, {ErrConfig, ExitUsage},
	{ErrTimeout, ExitTimeout}, {ErrResults, ExitResults}, {ErrReplicaError, ExitReplicaError},
	{ErrRendezvous, ExitRendezvous}, {context.Canceled, ExitSignal(syscall.SIGTERM)},
	{context.DeadlineExceeded, ExitTimeout},
}
