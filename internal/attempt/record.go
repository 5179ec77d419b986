package attempt

import (
	"errors"
	"os"
	"slices"
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
	if i := slices.IndexFunc(a.Ranks, func(s RankSummary) bool { return s.Rank == v.Failure.Rank }); i >= 0 {
		return &a.Ranks[i]
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

// readResults reads the worker's result channel (the read end of its fd 3) into the collector until EOF, or until
// the launcher stops draining (os.ErrDeadlineExceeded). A violation of the result contract is the collector's to
// report; only its other failures are this rank's (a *failure.ResultError in the report, failure.ErrResults).
func readResults(coll *results.Collector, wk *child, pid int) {
	var violation *results.ContractError
	err := coll.Consume(wk.w.Rank, pid, wk.w.Replicas, wk.drain.Reader(wk.readers[2]))
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.As(err, &violation) {
		wk.resErr = err
	}
}
