package failure_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"tpurun/internal/failure"
)

// TestExitCodeOfEachCategory: a configuration error exits 2, bare or wrapped, whatever else it wraps; every other
// category keeps its row of the table, a caller's cancel and deadline included; an error of no category is 70. Each
// layer's own errors are held to their category by that layer's tests.
func TestExitCodeOfEachCategory(t *testing.T) {
	malformed := failure.NewConfigKind("malformed value")
	config := []error{
		failure.ErrConfig, malformed,
		&failure.ConfigError{Field: failure.NProcs, Value: "x", Hint: "a number"},
		fmt.Errorf("%w: %w", failure.ErrRendezvous, malformed), // configuration first
		fmt.Errorf("metadata: %w: %w", malformed, context.DeadlineExceeded),
	}
	for _, err := range config {
		for _, e := range []error{err, fmt.Errorf("detect: %w", err), errors.Join(errors.New("first"), err)} {
			if !errors.Is(e, failure.ErrConfig) {
				t.Errorf("errors.Is(%v, ErrConfig) = false", e)
			}
			if got := failure.ExitCode(e); got != failure.ExitUsage {
				t.Errorf("ExitCode(%T %v) = %d, want %d", e, e, got, failure.ExitUsage)
			}
		}
	}
	if errors.Is(malformed, errors.New("malformed value")) || malformed.Error() != "malformed value" {
		t.Errorf("NewConfigKind: %v matches another error of its text, or reads otherwise", malformed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	<-ctx.Done()
	others := []struct {
		err  error
		code int
	}{
		{nil, failure.ExitOK},
		{failure.ErrTimeout, failure.ExitTimeout},
		{failure.ErrRendezvous, failure.ExitRendezvous},
		{failure.ErrResults, failure.ExitResults},
		{failure.ErrReplicaError, failure.ExitReplicaError},
		{failure.ErrInternal, failure.ExitInternal},
		{&failure.ProgramError{Program: "x", Err: syscall.ENOENT}, failure.ExitNotFound},
		{&failure.ProgramError{Program: "x", Err: syscall.ENOENT, AtExec: true}, failure.ExitNotExecutable},
		{context.Canceled, 128 + int(syscall.SIGTERM)},
		{fmt.Errorf("run: %w", ctx.Err()), failure.ExitTimeout}, // a caller's deadline, as --timeout
		{&failure.SignalError{Signal: syscall.SIGINT}, 128 + int(syscall.SIGINT)},
		{&failure.OutputError{Stream: "stdout", Err: syscall.EPIPE}, 128 + int(syscall.SIGPIPE)},
		{&failure.OutputError{Stream: "stdout", Err: syscall.ENOSPC}, failure.ExitIOError},
		{&failure.JobClosedError{Err: errors.New("job j already finished"), Code: 3}, failure.ExitOK},
		{&failure.JobClosedError{Err: errors.New("job j already finished"), Code: 3, Ran: true}, 3},
		{errors.New("anything else"), failure.ExitInternal},
	}
	for _, tc := range others {
		if got := failure.ExitCode(tc.err); got != tc.code {
			t.Errorf("ExitCode(%v) = %d, want %d", tc.err, got, tc.code)
		}
	}
}
