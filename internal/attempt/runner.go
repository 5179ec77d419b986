package attempt

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/proc"
	"tpurun/internal/results"
	"tpurun/internal/stop"
	"tpurun/internal/topology"

	"go.uber.org/zap"
)

// stderrTailLines is how many last stderr lines of a failed rank the report shows.
const stderrTailLines = 10

// Runner runs the attempts of this node's workers, one at a time: what every attempt of a run shares, filled once
// by the job after the host's preparation (the job's narrow interface to its attempts).
type Runner struct {
	Options // the Spec's part for attempts, as the job was given it

	RunLogs string // this run's directory below LogDir: <run-id>_<random>
	Scratch string // holds the error files when there is no log directory

	Stdout, Stderr *console.Console

	Log     *zap.Logger
	Starter Starter      // starts a worker otherwise than by exec (the preloaded interpreter); nil: exec
	Reaper  *proc.Reaper // the process's reaper, lent to the run; nil without one
	Sampler *Sampler
	Term    *Terminal        // the terminal whose input goes to local rank 0; nil without one
	Ctl     *stop.Controller // the one stop controller of the run

	OnFailed func(n int, we *proc.WorkerError) // the first failed worker of attempt n, before the others are stopped
}

// Options is the part of the job's Spec that its attempts read: the workers' command, their stop, their output and
// the sweep. The Spec embeds it and the job hands it to the Runner as it is, so that a setting has one field.
type Options struct {
	Program []string // program and arguments; ${local_rank} in arguments is expanded per worker
	Env     []string // inherited environment; nil means os.Environ()
	Dir     string   // working directory of the workers; "" is the launcher's

	RunID    string // default: random (multi-host: the rendezvous run id)
	Role     string // ROLE_NAME; default workerenv.DefaultRole
	SweepTag string // given to every worker as TPURUN_SWEEP_TAG, which the sweep by environment matches; default random

	Grace        time.Duration // SIGTERM to SIGKILL; default DefaultGrace
	Timeout      time.Duration // stop the whole job after this long (failure.ErrTimeout); 0 means none
	MaxRestarts  int           // restart the whole world up to this many times after a failure
	DrainTimeout time.Duration // after the subtree is gone, how long a pipe may stay idle before it is given up; default 2s

	LogDir           string          // per-rank files DIR/<run-id>_<random>/attempt_<n>/<local rank>/{stdout,stderr}.log
	Redirects        console.StdSpec // streams that go only to the log files
	Tee              console.StdSpec // streams that go to the console and the log files
	LocalRanksFilter []int           // show only these local ranks on the console; nil shows all
	LogPrefix        string          // per-line prefix template; default console.DefaultPrefix ({rank} or torchrun's $rank, see console.Prefix)
	RawOutput        bool            // worker lines go to the console as they are, without LogPrefix (torchrun's default)
	// Stdin is what the workers read (the CLI passes its own stdin, as torchrun's workers inherit it); nil gives
	// every worker /dev/null. StdinTo says which workers get it. When Stdin is the terminal whose foreground group
	// tpurun's is, only local rank 0 reads it, through a pseudo-terminal tpurun relays it to (docs/CONTROL.md).
	Stdin   *os.File
	StdinTo console.StdinMode

	// SweepSubtree says this process runs nothing but the job, as tpurun does: the orphan sweep (with the reaper,
	// while no other Run of the process uses it) then walks the whole subtree of the process and also finds an
	// orphan that dropped the job's environment; it would kill any other process of the program too. Off, the
	// sweep finds the job's processes by the sweep tag in their environment.
	SweepSubtree bool
}

// Spec is one attempt of the local group, fixed before it starts: which workers of which plan, the
// run-time values their environment gets, where results go, and who hears of this node's own stop.
type Spec struct {
	N          int // attempt (generation) number: TORCHELASTIC_RESTART_COUNT
	Plan       *topology.Plan
	NodeRank   int
	MasterAddr string
	MasterPort int
	Results    *results.Collector // reads every worker's result channel
	Announce   func(*stop.Cause)  // called once on the controller's goroutine as this node begins to stop; must not block
}

// child is one started worker process of one attempt.
type child struct {
	w       topology.Worker
	p       *proc.Process // set on the controller's goroutine
	readers []*os.File    // the launcher's ends: stdout, stderr (stdout's when oneStream), results (then local rank 0's terminal, see terminalInput)
	one     bool          // stdout and stderr are one pipe or pseudo-terminal (see oneStream): errTail holds both
	files   []*os.File    // log files
	fwd     []forward     // of stdout and stderr (and the terminal), attached once the worker started
	masters []*os.File    // the readers that are pseudo-terminals (tpurun at a terminal): tpurun's window size follows
	input   *os.File      // the pseudo-terminal that gets what is typed at tpurun's terminal, nil when none
	ctty    *os.File      // the master of its controlling terminal when it leads a session of its own, else nil
	io      sync.WaitGroup
	errTail console.Tail
	errFile string
	resErr  error
	exit    proc.Exit // once released
	// drain reads the worker's pipes: once its subtree is gone, a pipe that stays idle for the drain timeout is
	// given up (see console.Drain).
	drain console.Drain
}

// forward is one forwarder of a worker's output and what it reads.
type forward struct {
	*console.Forwarder
	from *os.File
}

// Run starts every local worker of as once and lets the controller supervise them until every one has exited,
// the orphans are swept and the pipes drained; then it releases the held zombies and summarizes each rank.
// stopSeq is the controller's StopSeq when it ended.
func (r *Runner) Run(as Spec) (a *Attempt, stopSeq int) {
	n := as.N
	local := as.Plan.Local(as.NodeRank)
	a = &Attempt{Number: n}
	if r.LogDir != "" {
		a.LogDir = filepath.Join(r.LogDir, r.RunLogs, "attempt_"+strconv.Itoa(n))
	}
	s := &supervisor{r: r, as: as, a: a, m: NewMachine(r.Grace), exits: make(chan func(), len(local)),
		settled: make(chan struct{})}
	r.Ctl.Attach(s)
	if err := r.makeLogDirs(n, local); err != nil {
		r.Ctl.Stop(stop.ErrCause(stop.Start, err)) // nothing started
	} else {
		r.startAll(s, local)
	}
	r.Ctl.Do(func() { s.feed(Event{Kind: EvStarted}) })
	<-s.settled
	r.release(a, s.ws)
	a.Verdict = s.m.cause.Verdict(n, r.Timeout, s.m.escalated)
	if a.Verdict.Reason == stop.Done {
		for _, rs := range a.Ranks {
			if rs.ResultErr != nil {
				err := &failure.ResultError{Rank: rs.Rank, PID: rs.PID, Err: rs.ResultErr}
				a.Verdict = &stop.Verdict{Reason: stop.Done, Code: failure.ExitCode(err), Node: -1, Err: err}
				break
			}
		}
	}
	return a, s.stopSeq
}

// release lets every held zombie be reaped (with its resource usage), closes the pipes and log files and fills
// in the per-rank summaries.
func (r *Runner) release(a *Attempt, ws []*child) {
	for _, wk := range ws {
		wk.exit = wk.p.Release() // the group is torn down: let the pid go, with the resource usage
	}
	present := r.errorFiles()
	for _, wk := range ws {
		for _, f := range slices.Concat(wk.readers, wk.files) {
			_ = f.Close()
		}
		ex := wk.exit
		s := RankSummary{
			Rank: wk.w.Rank, LocalRank: wk.w.LocalRank, Exit: ex,
			Sampled: r.Sampler.remove(ex.PID), StderrTail: wk.errTail.Lines(stderrTailLines), TailHasStdout: wk.one,
			ErrorFile: wk.errFile, ResultErr: wk.resErr,
		}
		if r.LogDir == "" {
			s.ErrorFile = "" // it lived in the run's scratch directory, removed at the end: name no path that is gone
		}
		var rec *ErrorRecord
		var err error
		if present == nil || present[filepath.Base(wk.errFile)] {
			rec, err = readErrorFile(wk.errFile)
		}
		if err != nil {
			r.Log.Warn("unreadable TORCHELASTIC_ERROR_FILE", zap.Int("rank", wk.w.Rank), zap.Error(err))
		}
		s.Error = rec
		a.Ranks = append(a.Ranks, s)
	}
}

// errorFiles are the names in the run's scratch directory, which holds the error files without a log directory:
// one listing instead of an open per worker. nil when unknown: each file is looked for.
func (r *Runner) errorFiles() map[string]bool {
	if r.LogDir != "" || r.Scratch == "" {
		return nil
	}
	ents, err := os.ReadDir(r.Scratch)
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
