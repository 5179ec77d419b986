package failure

import (
	"context"
	"errors"
	"syscall"

	"tpurun/internal/exitcode"
)

// ExitCode maps an error of a job (Run's, or the parsing of its Spec) to tpurun's exit code: the code of the
// first error in its tree that carries one (an ExitStatus method: a Verdict's code, decided when the verdict was
// made, a worker's status, a signal's 128+N); for any other error, the code of its sentinel; ExitCode(nil) is 0.
func ExitCode(err error) int {
	if err == nil {
		return exitcode.OK
	}
	var c interface{ ExitStatus() int }
	if errors.As(err, &c) {
		return c.ExitStatus()
	}
	for _, s := range sentinelCodes {
		if s.is(err) {
			return s.code
		}
	}
	return exitcode.Internal
}

// sentinelCodes maps the sentinels (and a usage error, in any layer's terms: exitcode.IsUsage) to their codes, in
// the order they are tested.
var sentinelCodes = []struct {
	is   func(error) bool
	code int
}{
	{sentinel(ErrNotFound), exitcode.NotFound}, {sentinel(ErrNotExecutable), exitcode.NotExecutable}, {exitcode.IsUsage, exitcode.Usage},
	{sentinel(ErrTimeout), exitcode.Timeout}, {sentinel(ErrResults), exitcode.Results}, {sentinel(ErrReplicaError), exitcode.ReplicaError},
	{sentinel(ErrRendezvous), exitcode.Rendezvous}, {sentinel(context.Canceled), exitcode.Signal(syscall.SIGTERM)},
	{sentinel(context.DeadlineExceeded), exitcode.Timeout}, // a library caller's deadline: a timeout, not an internal error
}

func sentinel(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}
