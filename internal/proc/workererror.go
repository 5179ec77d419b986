package proc

import (
	"fmt"
	"time"

	"tpurun/internal/failure"
)

// WorkerError is the first worker that failed: the root cause of a failed run. Its ExitStatus, the code tpurun
// passes on (failure.ExitCode finds it), is its Exit's: the worker's code, or 128+N for signal N.
type WorkerError struct {
	Rank    int
	Attempt int
	Exit
}

func (e *WorkerError) Error() string {
	if e.Signal != 0 {
		return fmt.Sprintf("rank %d (pid %d, attempt %d) was killed by %s after %s",
			e.Rank, e.PID, e.Attempt, failure.SignalName(e.Signal), e.Wall.Round(time.Millisecond))
	}
	return fmt.Sprintf("rank %d (pid %d, attempt %d) exited with code %d after %s",
		e.Rank, e.PID, e.Attempt, e.ExitCode, e.Wall.Round(time.Millisecond))
}
