package attempt

import (
	"errors"
	"io"
	"os"
	"tpurun/internal/proc"
	"tpurun/internal/results"
	"tpurun/internal/stop"
)

// Attempt is one start of the whole group (attempt 0, then one per restart).
type Attempt struct {
	Number  int
	Verdict *stop.Verdict // how this attempt ended (its reason, exit code, root cause)
	Ranks   []RankSummary // in local-rank order
	Swept   []int         // pids the orphan sweep had to kill
	LogDir  string        // DIR/<run-id>_<random>/attempt_<n>, "" without --log-dir

	EndOrder []int // ranks in the order their processes ended (for the results document's exit code)
}

// RankSummary is one worker of one attempt: how its process ended (the Exit: PID, ExitCode, Signal, Wall and the
// resource usage from wait4's rusage; Ended says it as text) and what the launcher saw of it.
type RankSummary struct {
	Rank, LocalRank int
	proc.Exit
	Sampled    Sample // last live sample (gopsutil)
	StderrTail []string
	// TailHasStdout says that StderrTail holds the worker's stdout too: its stdout and stderr were one stream,
	// in the order it wrote them (see Runner's oneStream).
	TailHasStdout bool
	ErrorFile     string
	Error         *ErrorRecord // parsed ErrorFile, nil if the worker wrote none
	ResultErr     error        // from the result sink
}

// Failed is the summary of the rank whose failure ended the attempt, nil when no worker's failure did.
func (a *Attempt) Failed() *RankSummary {
	v := a.Verdict
	if v == nil || v.Reason != stop.Failure || v.Failure == nil {
		return nil
	}
	for i, s := range a.Ranks {
		if s.Rank == v.Failure.Rank {
			return &a.Ranks[i]
		}
	}
	return nil
}

// ResultExits is how each rank of a ended, in the order the processes ended (ranks that never ended, e.g. never
// started, follow in rank order), as results.Collector.Finish wants it: the exit status, or 128+N and the
// signal's name for a rank killed by signal N.
func (a *Attempt) ResultExits() []results.RankExit {
	left := make(map[int]proc.Exit, len(a.Ranks))
	for _, s := range a.Ranks {
		left[s.Rank] = s.Exit
	}
	out := make([]results.RankExit, 0, len(a.Ranks))
	for _, rank := range a.EndOrder { // each rank once, every one of them in Ranks
		out = append(out, results.ExitOf(rank, left[rank]))
		delete(left, rank)
	}
	for _, s := range a.Ranks {
		if _, ok := left[s.Rank]; ok {
			out = append(out, results.ExitOf(s.Rank, s.Exit))
		}
	}
	return out
}

// Sink receives each worker's result channel (the read end of its fd 3). Consume is called once per started
// worker, from its own goroutine, and must return when r returns an error (os.ErrDeadlineExceeded once the launcher
// stops draining). Its error is a *failure.ResultError in the report (failure.ErrResults). nil drains and discards.
type Sink interface {
	Consume(rank, pid int, replicas []int, r io.Reader) error
}

// readResults reads the worker's result channel into the sink (or discards it). A violation of the result
// contract is the collector's to report; only a sink's other failures are this rank's.
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
