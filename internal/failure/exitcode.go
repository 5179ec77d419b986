package failure

import (
	"context"
	"errors"
	"syscall"
)

// ExitCode maps an error of a job to tpurun's exit code (a row of ExitTable): the code of the first error in its
// tree with an ExitStatus method (a verdict's, a worker's, a signal's 128+N), else its category's, in the order of
// the package doc's table; anything else is 70 (ErrInternal). ExitCode(nil) is 0.
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
