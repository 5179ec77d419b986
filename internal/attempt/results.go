package attempt

import (
	"errors"
	"io"
	"os"

	"tpurun/internal/results"
)

// Sink receives each worker's private result channel (the read end of the pipe that is the worker's fd 3).
// Consume is called once per started worker, from its own goroutine, and must return when r returns an error
// (including os.ErrDeadlineExceeded once the launcher stops draining). A returned error is recorded in the
// report as a *failure.ResultError and makes the run fail with failure.ErrResults. A nil sink drains and discards.
type Sink interface {
	Consume(rank, pid int, replicas []int, r io.Reader) error
}

// readResults reads the worker's result channel into the sink (or discards it without one). A violation of the
// result contract is the collector's to report (its document names each one, with a hint, and decides the exit
// code); only a sink's other failures are this rank's.
func readResults(sink Sink, wk *child, pid int) {
	res := wk.drain.Reader(wk.readers[2])
	if sink == nil {
		_, _ = io.Copy(io.Discard, res)
		return
	}
	var violation *results.ContractError
	err := sink.Consume(wk.w.Rank, pid, wk.w.Replicas, res)
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.As(err, &violation) {
		wk.resErr = err
	}
}
