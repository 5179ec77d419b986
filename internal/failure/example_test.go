package failure_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"tpurun/internal/failure"
)

// ExitCode maps any error of a job, bare or wrapped, to tpurun's exit code: an error that carries its code (a
// worker's status, another node's verdict, a stop signal's 128+N) gives it; the categories, every configuration
// error and a caller's cancel or deadline map by their row; anything else is an internal error (70).
func ExampleExitCode() {
	for _, err := range []error{
		nil,
		&failure.NodeError{Node: 1, Code: 3, Message: "rank 4 exited with code 3"},
		fmt.Errorf("attempt 0: %w", &failure.SignalError{Signal: syscall.SIGTERM, During: "the rendezvous join"}),
		&failure.ConfigError{Field: failure.Grace, Value: "-1s", Hint: "must not be negative"},
		fmt.Errorf("%w: the timeout 5s expired", failure.ErrTimeout),
		context.Canceled,
		context.DeadlineExceeded,
		errors.New("something else"),
	} {
		fmt.Println(failure.ExitCode(err))
	}
	// Output:
	// 0
	// 3
	// 143
	// 2
	// 124
	// 143
	// 124
	// 70
}
