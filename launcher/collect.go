package launcher

import (
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
