package failure_test

import (
	"errors"
	"fmt"
	"syscall"

	"tpurun/internal/failure"
)

// A worker killed by a signal, and tpurun stopped by one, exit 128+N, as a shell reports them.
func ExampleExitSignal() {
	fmt.Println(failure.ExitSignal(syscall.SIGTERM), failure.ExitSignal(syscall.SIGKILL))
	// Output: 143 137
}

// A layer names its own kind of configuration error once (NewConfigKind); errors.Is finds both the kind and
// ErrConfig however the error is wrapped, and ExitCode gives 2.
func ExampleNewConfigKind() {
	errBadSplit := failure.NewConfigKind("impossible split")
	err := fmt.Errorf("plan the workers: %w", errBadSplit)
	fmt.Println(errors.Is(err, failure.ErrConfig), errors.Is(err, errBadSplit), failure.ExitCode(err), err)
	fmt.Println(errors.Is(errors.New("disk full"), failure.ErrConfig))
	// Output:
	// true true 2 plan the workers: impossible split
	// false
}
