package launcher

import (
	"io"
)

// resultSink receives each worker's private result channel (the read end of the pipe that is the worker's fd 3).
// Consume is called once per started worker, from its own goroutine, and must return when r returns an error
// (including os.ErrDeadlineExceeded once the launcher stops draining). A returned error is recorded in the
// report as a *failure.ResultError and makes the run fail with failure.ErrResults. A nil sink drains and discards.
type resultSink interface {
	Consume(rank, pid int, replicas []int, r io.Reader) error
}
