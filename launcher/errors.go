package launcher

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"tpurun/internal/failure"
	"tpurun/internal/proc"
)

// The errors a caller matches with errors.Is in what Run and Plan return. Besides them, a caller's context ends the
// job with its own error in the chain: context.Canceled, or context.DeadlineExceeded.
var (
	ErrConfig     = errors.New("invalid configuration") // a setting is wrong; nothing started (exit 2)
	ErrTimeout    = failure.ErrTimeout                  // Spec.Timeout expired (exit 124)
	ErrRendezvous = failure.ErrRendezvous               // the nodes could not meet or agree (exit 69)
	ErrResults    = failure.ErrResults                  // the result contract was violated (exit 65)
	ErrNotFound   = failure.ErrNotFound                 // the program was not found (exit 127)
)

// WorkerError is the worker whose failure ended the job (its root cause): errors.As finds it in Run's error.
type WorkerError struct {
	Rank    int            // the worker's global rank
	Attempt int            // the attempt it failed in (0, then one per restart)
	PID     int            // its process id
	Code    int            // its exit code, -1 when killed by a signal
	Signal  syscall.Signal // the killing signal, 0 when it exited
	Wall    time.Duration  // from its start to its exit
	msg     string
}

func (e *WorkerError) Error() string {
	if e.msg != "" {
		return e.msg
	}
	return fmt.Sprintf("rank %d (pid %d, attempt %d) exited with code %d", e.Rank, e.PID, e.Attempt, e.ExitCode())
}

// ExitCode is the code the job exits with for this worker: its exit code, or 128+N when signal N killed it.
func (e *WorkerError) ExitCode() int {
	if e.Signal != 0 {
		return failure.ExitSignal(e.Signal)
	}
	return e.Code
}

// ExitCode is the exit code for err, an error Run or Plan returned; tpurun's command line exits with the same
// codes (tpurun help exit-codes):
//
//	0      err is nil: every worker exited 0 (and every expected result arrived)
//	1-125  the exit code of the first worker that failed (WorkerError); 1 when only a replica reported an error
//	128+N  the first failed worker was killed by signal N, or the job was stopped by signal N (Process)
//	143    the caller's context was canceled (context.Canceled)
//	2      a configuration error (ErrConfig): nothing started
//	65     the result contract was violated (ErrResults)
//	69     the rendezvous failed at run time, or its store was lost (ErrRendezvous)
//	70     a fault of the launcher itself
//	74     writing the output failed (Output.Stdout, Stderr, ResultsSpec.File)
//	124    Spec.Timeout expired (ErrTimeout), or the caller's context deadline passed (context.DeadlineExceeded)
//	126    the program cannot be executed
//	127    the program was not found (ErrNotFound)
func ExitCode(err error) int { return failure.ExitCode(err) }

// runError is an error of Run or Plan as the caller sees it: the launcher's own error (its message, its code, the
// sentinels and context errors in its chain) with the public WorkerError of its root cause beside it.
type runError struct {
	err    error
	worker *WorkerError
}

// errorOf wraps err, nil for nil.
func errorOf(err error) error {
	if err == nil {
		return nil
	}
	e := &runError{err: err}
	var we *proc.WorkerError
	if errors.As(err, &we) {
		e.worker = workerErrorOf(we)
	}
	return e
}

func (e *runError) Error() string { return e.err.Error() }

// Unwrap gives the launcher's error, then the WorkerError.
func (e *runError) Unwrap() []error {
	if e.worker == nil {
		return []error{e.err}
	}
	return []error{e.err, e.worker}
}

// Is matches ErrConfig for every configuration error of every layer (detection's, the rendezvous's, the Spec's
// own: exit 2, and no worker's); the other sentinels are the launcher's own, in the chain.
func (e *runError) Is(target error) bool {
	return target == ErrConfig && e.worker == nil && errors.Is(e.err, failure.ErrConfig)
}
