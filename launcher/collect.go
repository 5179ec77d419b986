package launcher

import (
	"fmt"
	"io"
	"strings"

	"go.uber.org/zap"

	"tpurun/launcher/failure"
	"tpurun/launcher/proc"
	"tpurun/launcher/results"
)

// ResultExits is how each rank of a ended, in the order the processes ended (ranks that never ended, e.g. never
// started, follow in rank order), as results.Collector.Finish wants it: the exit status, or 128+N and the
// signal's name for a rank killed by signal N.
func (a *Attempt) ResultExits() []results.RankExit {
	byRank := make(map[int]RankSummary, len(a.Ranks))
	for _, s := range a.Ranks {
		byRank[s.Rank] = s
	}
	out := make([]results.RankExit, 0, len(a.Ranks))
	seen := make(map[int]bool, len(a.Ranks))
	add := func(s RankSummary) {
		seen[s.Rank] = true
		out = append(out, s.resultExit())
	}
	for _, rank := range a.EndOrder {
		if s, ok := byRank[rank]; ok && !seen[rank] {
			add(s)
		}
	}
	for _, s := range a.Ranks {
		if !seen[s.Rank] {
			add(s)
		}
	}
	return out
}

// resultExit is how the rank ended, for the results document: the exit status, or 128+N and the signal's name.
func (s RankSummary) resultExit() results.RankExit {
	e := results.RankExit{Rank: s.Rank, PID: s.PID, ExitCode: proc.Exit{Code: s.ExitCode, Signal: s.Signal}.ExitStatus()}
	if s.Signal != 0 {
		e.Signal = failure.SignalName(s.Signal)
	}
	return e
}

// WriteResultsSummary writes what the results document says went wrong: every contract violation by name with
// its hint, and every replica's reported error, with its traceback when tracebacks is set (as one record on log,
// when given: --log-format json). It writes nothing for a clean document. A run that prints the document (--json,
// and so tpurun.spawn, whose SpawnError carries the traceback) leaves the tracebacks to it, so that each is shown
// once.
func WriteResultsSummary(w io.Writer, log *zap.Logger, doc *results.Document, tracebacks bool) {
	switch {
	case doc == nil:
	case log != nil: // --log-format json: one record with the same facts
		logResults(log, doc, tracebacks)
	default:
		for _, v := range doc.Violations {
			fmt.Fprintf(w, "  results: %s: %s\n", v.Kind, v.Message)
			if v.Hint != "" {
				fmt.Fprintf(w, "    hint: %s\n", v.Hint)
			}
		}
		for _, r := range doc.ReplicaErrors() {
			writeReplicaError(w, r, tracebacks)
		}
	}
}

// logResults is WriteResultsSummary as one record on log.
func logResults(log *zap.Logger, doc *results.Document, tracebacks bool) {
	failed := doc.ReplicaErrors()
	if !tracebacks { // the document printed beside it has them
		for i := range failed {
			e := *failed[i].Error
			e.Traceback, failed[i].Error = "", &e
		}
	}
	if len(doc.Violations) > 0 || len(failed) > 0 {
		log.Warn("results", zap.Any("violations", doc.Violations), zap.Any("replica_errors", failed))
	}
}

// writeReplicaError writes the error replica r reported, with its traceback when tracebacks is set.
func writeReplicaError(w io.Writer, r results.Result, tracebacks bool) {
	fmt.Fprintf(w, "  root cause: replica %d (rank %d, pid %d) raised %s: %s\n",
		r.Replica, r.Rank, r.PID, r.Error.Type, r.Error.Message)
	if !tracebacks {
		return
	}
	for _, l := range strings.Split(strings.TrimRight(r.Error.Traceback, "\n"), "\n") {
		if l != "" {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
}
