package failure_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"tpurun/internal/failure"
	"tpurun/internal/proc"
)

// ExitCode maps any error of a job, bare or wrapped, to tpurun's exit code: an error that carries its code (a
// worker's status, a stop signal's 128+N) gives it; the sentinels and every configuration error map by their kind;
// anything else is an internal error (70).
func ExampleExitCode() {
	for _, err := range []error{
		nil,
		&proc.WorkerError{Rank: 1, Exit: proc.Exit{ExitCode: 3}},
		&proc.WorkerError{Rank: 0, Exit: proc.Exit{ExitCode: -1, Signal: syscall.SIGKILL}},
		fmt.Errorf("attempt 0: %w", &failure.SignalError{Signal: syscall.SIGTERM, During: "the rendezvous join"}),
		&failure.ConfigError{Field: failure.Grace, Value: "-1s", Hint: "must not be negative"},
		fmt.Errorf("%w: the timeout 5s expired", failure.ErrTimeout),
		context.Canceled,
		errors.New("something else"),
	} {
		fmt.Println(failure.ExitCode(err))
	}
	// Output:
	// 0
	// 3
	// 137
	// 143
	// 2
	// 124
	// 143
	// 70
}
