package attempt

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"tpurun/internal/console"
	"tpurun/internal/proc"
	"tpurun/internal/safepath"
	"tpurun/internal/stop"
	"tpurun/internal/topology"
	"tpurun/internal/workerenv"
)

// Starter starts one worker process of an attempt, held (see proc.StartHeld), otherwise than by exec: forked from
// the preloaded interpreter (--preload). cmd has its Path, Args, Env, Dir, stdio and ExtraFiles set.
type Starter interface {
	Start(rp *proc.Reaper, cmd *exec.Cmd, onExit func(*proc.Process)) (*proc.Process, error)
}

// startAll starts the workers one after the other, until all run or the attempt begins to stop; a worker that
// cannot be started stops the attempt.
func (r *Runner) startAll(s *supervisor, local []topology.Worker) {
	l := r.newLaunch(s)
	started := 0
	starts := func() {
		for _, w := range local {
			if s.stopping.Load() {
				break
			}
			ok, err := r.start1(l, w)
			if err != nil {
				r.Ctl.Stop(stop.ErrCause(stop.Start, err))
			}
			if !ok {
				break
			}
			started++
		}
	}
	if r.Reaper != nil && r.Starter == nil {
		r.Reaper.Starting(starts) // each start without a hand-over to the reaper's thread and back
	} else {
		starts()
	}
	r.Log.Info("workers started", zap.Int("attempt", s.as.N), zap.Int("workers", started),
		zap.String("master", fmt.Sprintf("%s:%d", s.as.MasterAddr, s.as.MasterPort)))
}

// launch is what the start of every worker of one attempt shares, worked out once: the program (looked up in PATH
// once), its arguments when they do not vary by rank, and the parts of the environment every worker gets.
type launch struct {
	sv     *supervisor
	env    *workerenv.Builder
	prog   *exec.Cmd // Path and Err of the program, as exec.Command found it
	args   []string  // the worker's argv when no argument has ${local_rank}; nil otherwise
	stdin  [2]*os.File
	relay0 bool          // local rank 0 reads the terminal, through a pseudo-terminal of its own (see Terminal)
	tty    [2]bool       // tpurun's stdout, stderr are terminals: a shown stream gets a pseudo-terminal
	ws     *unix.Winsize // tpurun's window size, for them
	noPty  sync.Once     // the warning that a pseudo-terminal could not be made
}

func (r *Runner) newLaunch(sv *supervisor) *launch {
	as := sv.as
	rt := workerenv.Runtime{RunID: r.RunID, Role: r.Role, RestartCount: as.N, MaxRestarts: r.MaxRestarts,
		MasterAddr: as.MasterAddr, MasterPort: as.MasterPort, SweepTag: r.SweepTag}
	l := &launch{sv: sv, env: workerenv.NewBuilder(r.Env, as.Plan, rt), prog: proc.Command(r.Program[0])}
	if !slices.ContainsFunc(r.Program[1:], func(a string) bool { return strings.Contains(a, "${local_rank}") }) {
		l.args = append([]string{r.Program[0]}, r.Program[1:]...)
	}
	l.stdin[0], l.relay0 = r.stdinFor(0)
	l.stdin[1], _ = r.stdinFor(1)
	for i, c := range []*console.Console{r.Stdout, r.Stderr} {
		l.tty[i] = c != nil && c.Terminal()
	}
	if l.relay0 || l.tty[0] || l.tty[1] {
		l.ws = r.windowSize()
	}
	return l
}

// start1 prepares worker w and starts it; it hands the worker to the supervisor, and only then attaches its
// readers. ok is false when w did not start: err says why, nil when the attempt began to stop meanwhile.
func (r *Runner) start1(l *launch, w topology.Worker) (ok bool, err error) {
	sv := l.sv
	wk := &child{w: w}
	cmd, err := r.command(l, wk)
	if err != nil {
		return false, err
	}
	writeEnds, err := r.streams(l, wk, cmd) // the caller closes the write ends once the worker started
	if err != nil {
		return false, err
	}
	forked := r.Ctl.StartGate(sv.stopping.Load) // not while job control holds the job stopped
	defer forked()                              // once the supervisor has it: a job-control stop stops it
	var p *proc.Process
	if !sv.stopping.Load() {
		p, err = r.startCmd(cmd, func(p *proc.Process) { sv.exits <- func() { sv.exited(wk, p) } })
	}
	for _, f := range writeEnds {
		_ = f.Close()
	}
	if p == nil {
		for _, f := range slices.Concat(wk.readers, wk.files) {
			_ = f.Close()
		}
		if err != nil {
			err = r.startError(w, err, cmd)
		}
		return false, err
	}
	r.Sampler.add(p.PID(), w.Rank)
	sv.started(wk, p)
	r.attach(sv, wk, p)
	return true, nil
}

// startCmd starts cmd through the starter (held, its exit to onExit), else through the reaper (see
// proc.StartHeld).
func (r *Runner) startCmd(cmd *exec.Cmd, onExit func(*proc.Process)) (*proc.Process, error) {
	if r.Starter != nil {
		return r.Starter.Start(r.Reaper, cmd, onExit)
	}
	return proc.StartHeld(r.Reaper, cmd, onExit)
}

// attach starts the goroutines that read a started worker's pipes: its output forwarders and its result reader.
// Each closes its pipe once read to the end (release closes the rest, pseudo-terminals among it).
func (r *Runner) attach(sv *supervisor, wk *child, p *proc.Process) {
	for _, f := range wk.fwd {
		wk.io.Go(func() {
			_ = f.Run(wk.drain.Reader(f.from))
			if !slices.Contains(wk.masters, f.from) {
				_ = f.from.Close()
			}
			// A pseudo-terminal's master stays open until the worker was reaped (release): closing it hangs up the
			// worker's terminal, and a worker that has closed its stdio but not yet exited would die of SIGHUP.
		})
	}
	wk.fwd = nil
	wk.io.Go(func() {
		readResults(sv.as.Results, wk, p.PID())
		_ = wk.readers[2].Close()
	})
}

// rankLogDir is the directory of w in attempt n, relative to the log directory, as torchrun names it:
// <run-id>_<random>/attempt_<n>/<local rank>.
func (r *Runner) rankLogDir(n int, w topology.Worker) string {
	return filepath.Join(r.RunLogs, "attempt_"+strconv.Itoa(n), strconv.Itoa(w.LocalRank))
}

// makeLogDirs creates every local rank's log directory of attempt n before any worker starts, following no symlink
// below the log directory: one planted by an earlier worker is an *UnsafePathError and nothing starts.
func (r *Runner) makeLogDirs(n int, local []topology.Worker) error {
	if r.LogDir == "" {
		return nil
	}
	for _, w := range local {
		if err := safepath.MkdirAllBeneath(r.LogDir, r.rankLogDir(n, w), 0o755); err != nil {
			return fmt.Errorf("rank %d: log directory: %w%s", w.Rank, err, proc.LimitHint(err))
		}
	}
	return nil
}
