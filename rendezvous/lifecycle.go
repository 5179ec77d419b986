package rendezvous

import "fmt"

// JobClosedError is what a node learns when the job it joins, or waits in, has closed (see the package doc's
// lifecycle): the job under RunID ended with generation Generation and exit code ExitCode. A node that took no
// part in it (a late elastic node, a replacement) has nothing to do. errors.Is(err, ErrJobClosed) holds.
type JobClosedError struct {
	RunID      string
	Generation int
	ExitCode   int
}

func (e *JobClosedError) Error() string {
	return fmt.Sprintf("job %s already finished (generation %d, exit %d)", e.RunID, e.Generation, e.ExitCode)
}

// Is makes errors.Is(err, ErrJobClosed) true.
func (e *JobClosedError) Is(target error) bool { return target == ErrJobClosed }
