package launcher

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"

	"go.uber.org/zap"

	"tpurun/internal/attempt"
	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/proc"
	"tpurun/internal/topology"
)

// stderrTailLines is how many last stderr lines of a failed rank the report shows.
const stderrTailLines = 10

// attemptSpec is one attempt of the local group, fixed before it starts: which workers of which plan, the
// run-time values their environment gets, where results go, and who hears of this node's own stop.
type attemptSpec struct {
	n          int // attempt (generation) number: TORCHELASTIC_RESTART_COUNT
	plan       *topology.Plan
	nodeRank   int
	masterAddr string
	masterPort int
	sink       resultSink
	announce   func(*attempt.Cause) // called once, on the controller's goroutine, when this node begins to stop; must not block
}

// child is one started worker process of one attempt.
type child struct {
	w       topology.Worker
	p       *proc.Process        // set on the controller's goroutine
	holder  bool                 // it holds the terminal (local rank 0 with a terminal)
	readers []*os.File           // read ends: stdout, stderr, results
	files   []*os.File           // log files
	fwd     []*console.Forwarder // of stdout and stderr, attached once the worker started
	io      sync.WaitGroup
	errTail console.Tail
	errFile string
	resErr  error
	exit    proc.Exit
	exited  bool
	// drain reads the worker's pipes: once its subtree is gone, a pipe that stays idle for the drain timeout is
	// given up (see console.Drain).
	drain console.Drain
}

// attempt starts every local worker of as once and lets the controller supervise them (supervisor, machine.go)
// until every one has exited, the groups are killed, the orphans swept and the pipes drained; then it releases
// the held zombies and summarizes each rank. Its Verdict says how it ended.
func (j *job) attempt(as attemptSpec) *Attempt {
	n := as.n
	local := as.plan.Local(as.nodeRank)
	a := &Attempt{Number: n}
	j.obs.emit(Event{Kind: AttemptStarted, Attempt: n})
	if j.spec.LogDir != "" {
		a.LogDir = filepath.Join(j.spec.LogDir, j.runLogs, "attempt_"+strconv.Itoa(n))
	}
	s := newSupervisor(j.ctl, j, as, a, len(local))
	j.ctl.attach(s)
	if err := j.makeLogDirs(n, local); err != nil {
		j.ctl.stop(attempt.ErrCause(attempt.StopStart, err)) // nothing started
	} else {
		j.startAll(s, local)
	}
	j.ctl.do(func() { s.feed(attempt.Event{Kind: attempt.EvStarted}) })
	<-s.settled
	j.release(a, s.ws)
	a.Verdict = s.m.Verdict(n, j.spec.Timeout)
	if a.Verdict.Reason == attempt.StopDone {
		for _, r := range a.Ranks {
			if r.ResultErr != nil {
				err := &failure.ResultError{Rank: r.Rank, PID: r.PID, Err: r.ResultErr}
				a.Verdict = &attempt.Verdict{Reason: attempt.StopDone, Code: failure.ExitCode(err), Node: -1, Err: err}
				break
			}
		}
	}
	return a
}

// release lets every held zombie be reaped (with its resource usage), closes the pipes and log files and fills
// in the per-rank summaries.
func (j *job) release(a *Attempt, ws []*child) {
	for _, wk := range ws {
		wk.exit = wk.p.Release() // the group is torn down: let the pid go, with the resource usage
	}
	present := j.errorFiles()
	for _, wk := range ws {
		for _, f := range slices.Concat(wk.readers, wk.files) {
			_ = f.Close()
		}
		ex := wk.exit
		s := RankSummary{
			Rank: wk.w.Rank, LocalRank: wk.w.LocalRank, PID: ex.PID, ExitCode: ex.Code, Signal: ex.Signal,
			Wall: ex.Wall, UserCPU: ex.UserCPU, SysCPU: ex.SysCPU, MaxRSS: ex.MaxRSS,
			Sampled: j.sampler.remove(ex.PID), StderrTail: wk.errTail.Lines(stderrTailLines),
			ErrorFile: wk.errFile, ResultErr: wk.resErr,
		}
		if j.spec.LogDir == "" {
			s.ErrorFile = "" // it lived in the run's scratch directory, removed at the end: name no path that is gone
		}
		var rec *ErrorRecord
		var err error
		if present == nil || present[filepath.Base(wk.errFile)] {
			rec, err = readErrorFile(wk.errFile)
		}
		if err != nil {
			j.log.Warn("unreadable TORCHELASTIC_ERROR_FILE", zap.Int("rank", wk.w.Rank), zap.Error(err))
		}
		s.Error = rec
		a.Ranks = append(a.Ranks, s)
	}
}

// errorFiles are the names in the run's scratch directory, where the workers' TORCHELASTIC_ERROR_FILEs are without
// a log directory: one listing instead of an open per worker, most of which find nothing. nil when unknown (a log
// directory, or the listing failed): each file is looked for.
func (j *job) errorFiles() map[string]bool {
	if j.spec.LogDir != "" || j.scratch == "" {
		return nil
	}
	ents, err := os.ReadDir(j.scratch)
	if err != nil {
		return nil
	}
	names := make(map[string]bool, len(ents))
	for _, e := range ents {
		names[e.Name()] = true
	}
	return names
}

func sigText(s syscall.Signal) string {
	if s == 0 {
		return ""
	}
	return failure.SignalName(s)
}
