package failure_test

import (
	"errors"
	"fmt"
	"syscall"

	"tpurun/internal/failure"
)

// A worker killed by a signal, and tpurun stopped by one, exit 128+N, as a shell reports them.
func ExampleSignal() {
	fmt.Println(failure.ExitSignal(syscall.SIGTERM), failure.ExitSignal(syscall.SIGKILL))
	// Output: 143 137
}

// A package marks its configuration errors once, by a Usage method on its sentinels (NewUsage) and on the typed
// errors that match them; IsUsage finds the mark however the error is wrapped.
func ExampleIsUsage() {
	errBadSplit := failure.NewConfigKind("impossible split")
	err := fmt.Errorf("plan the workers: %w", errBadSplit)
	fmt.Println(errors.Is(err, failure.ErrConfig), errors.Is(err, errBadSplit), err)
	fmt.Println(failure.ErrConfig(errors.New("disk full")))
	// Output:
	// true true plan the workers: impossible split
	// false
}
