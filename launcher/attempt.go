package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"tpurun/launcher/proc"
	"tpurun/launcher/results"
	"tpurun/launcher/topology"
	"tpurun/worker"
)

// stderrTailLines is how many last stderr lines of a failed rank the report shows.
const stderrTailLines = 10

// attemptSpec is one attempt of the local group, fixed before it starts: which workers of which plan, the
// run-time values their environment gets, where results go, and who hears of the first failure.
type attemptSpec struct {
	n          int // attempt (generation) number: TORCHELASTIC_RESTART_COUNT
	plan       *topology.Plan
	nodeRank   int
	masterAddr string
	masterPort int
	sink       ResultSink
	onFailure  func(*WorkerError) // called once, from the supervisor, the moment a worker fails; must not block
}

// child is one started worker process of one attempt.
type child struct {
	w       topology.Worker
	p       *proc.Process
	readers []*os.File // read ends: stdout, stderr, results
	files   []*os.File // log files
	io      sync.WaitGroup
	errTail tail
	errFile string
	resErr  error
	exit    proc.Exit
	exited  bool
	// draining is set once the worker's subtree is gone: from then on a pipe that stays idle for the drain
	// timeout is given up (see drainReader).
	draining atomic.Bool
	idle     time.Duration
}

// drainReader reads one of a worker's pipes. Until the drain it blocks as long as it takes; while draining, each
// read may wait at most the idle bound for data: a pipe that yields nothing that long is held by a process outside
// the subtree. A reader that is slow because the console is slow is not idle: the bound starts at each read.
type drainReader struct {
	f  *os.File
	wk *child
}

func (d drainReader) Read(p []byte) (int, error) {
	if d.wk.draining.Load() {
		_ = d.f.SetReadDeadline(time.Now().Add(d.wk.idle))
	}
	return d.f.Read(p)
}

// attempt starts every local worker of as once and supervises them until all have been reaped, the groups killed
// and the orphans swept. Exits, signals, the timeout and the grace timer are events on one select: nothing polls.
// The error is the attempt's outcome: nil, the first *WorkerError, ErrTimeout, a *SignalError-free stop by
// signal (nil or the workers' failure), the context's error, or a start failure.
func (r *job) attempt(ctx context.Context, as attemptSpec) (*Attempt, error) {
	n := as.n
	local := as.plan.Local(as.nodeRank)
	a := &Attempt{Number: n, Reason: StopDone}
	r.obs.emit(Event{Kind: AttemptStarted, Attempt: n})
	if r.spec.LogDir != "" {
		a.LogDir = filepath.Join(r.spec.LogDir, r.runLogs, "attempt_"+strconv.Itoa(n))
	}
	exits := make(chan *child, len(local))
	ws := make([]*child, 0, len(local))
	var startErr error
	if err := r.makeLogDirs(n, local); err != nil {
		return a, err // nothing started
	}
	for _, w := range local {
		wk, err := r.start(as, a.LogDir, w, exits)
		if err != nil {
			startErr = err
			break
		}
		ws = append(ws, wk)
	}
	r.log.Info("workers started", zap.Int("attempt", n), zap.Int("workers", len(ws)),
		zap.String("master", fmt.Sprintf("%s:%d", as.masterAddr, as.masterPort)))

	stopping := false
	var grace *time.Timer
	var graceC <-chan time.Time
	signalAll := func(sig syscall.Signal) {
		for _, wk := range ws {
			if err := wk.p.Signal(sig); err != nil {
				r.log.Warn("signal failed", zap.Int("rank", wk.w.Rank), zap.Int("pid", wk.p.PID()), zap.Error(err))
			}
		}
	}
	beginStop := func(reason StopReason, sig syscall.Signal) {
		if stopping {
			return
		}
		stopping = true
		a.Reason = reason
		r.log.Info("stopping all workers", zap.String("reason", string(reason)), zap.String("signal", SignalName(sig)),
			zap.Duration("grace", r.spec.Grace))
		signalAll(sig)
		grace = time.NewTimer(r.spec.Grace)
		graceC = grace.C
	}
	if startErr != nil {
		beginStop(StopFailure, syscall.SIGTERM)
	}
	done := ctx.Done()
	for running := len(ws); running > 0; {
		select {
		case wk := <-exits:
			running--
			wk.exited = true
			wk.exit = wk.p.Status() // held: a zombie until cleanup, its group id reserved
			r.sampler.exited(wk.exit.PID)
			ex := wk.exit
			a.EndOrder = append(a.EndOrder, wk.w.Rank)
			r.log.Debug("worker exited", zap.Int("rank", wk.w.Rank), zap.Int("pid", ex.PID),
				zap.Int("code", ex.Code), zap.String("signal", sigText(ex.Signal)), zap.Duration("wall", ex.Wall))
			if !ex.Success() && a.Failure == nil && (!stopping || a.Reason == StopSignal) {
				a.Failure = &WorkerError{Rank: wk.w.Rank, PID: ex.PID, Attempt: n, ExitCode: ex.Code, Signal: ex.Signal, Wall: ex.Wall}
				r.log.Error("worker failed", zap.Int("rank", wk.w.Rank), zap.Int("pid", ex.PID), zap.Int("attempt", n),
					zap.Int("code", ex.Code), zap.String("signal", sigText(ex.Signal)))
				r.obs.emit(Event{Kind: WorkerFailed, Attempt: n, Failure: a.Failure})
				if as.onFailure != nil {
					as.onFailure(a.Failure)
				}
				beginStop(StopFailure, syscall.SIGTERM)
			}
		case sig := <-r.spec.Signals:
			s, ok := sig.(syscall.Signal)
			if !ok {
				continue
			}
			switch {
			case terminating(s):
				if !stopping {
					a.Signal = s
					if passedOn(s) {
						beginStop(StopSignal, s)
					} else {
						r.log.Warn(r.stopCause(s)+": stopping every worker with SIGTERM", zap.Int("exit", 128+int(s)))
						beginStop(StopSignal, syscall.SIGTERM)
					}
					continue
				}
				// Stopping already: whatever the reason, this signal ends the run (no restart).
				again := a.Reason == StopSignal || r.stopSignal != 0
				if a.Signal == 0 {
					a.Signal = s
				}
				if r.stopSignal == 0 {
					r.stopSignal = s
				}
				if again && (s == syscall.SIGINT || s == syscall.SIGTERM) {
					r.log.Warn("second " + SignalName(s) + ": killing every worker now, and not waiting for a reader of the output")
					signalAll(syscall.SIGKILL)
					r.stdout.Hurry(hurryWrite)
					r.stderr.Hurry(hurryWrite)
					continue
				}
				if !passedOn(s) {
					r.log.Warn("received "+SignalName(s)+" while stopping; the run ends after this attempt", zap.String("stopping_for", string(a.Reason)))
					continue
				}
				r.log.Warn("received "+SignalName(s)+" while stopping: forwarding it; the run ends after this attempt",
					zap.String("stopping_for", string(a.Reason)))
				signalAll(s)
			default:
				r.log.Info("forwarding signal", zap.String("signal", SignalName(s)))
				signalAll(s)
			}
		case <-r.timeout:
			r.timeout, r.expired = nil, true // recorded even when already stopping: Run does not restart then
			beginStop(StopTimeout, syscall.SIGTERM)
		case <-done:
			done = nil
			beginStop(StopCanceled, syscall.SIGTERM)
		case <-graceC:
			graceC = nil
			r.log.Warn("grace period over: SIGKILL to every worker group", zap.Duration("grace", r.spec.Grace))
			signalAll(syscall.SIGKILL)
		}
	}
	if grace != nil {
		grace.Stop()
	}
	r.cleanup(a, ws)
	if startErr != nil {
		return a, startErr
	}
	switch a.Reason {
	case StopTimeout:
		return a, fmt.Errorf("%w: the timeout %s expired in attempt %d; raise it or find the hung rank", ErrTimeout, r.spec.Timeout, n)
	case StopCanceled:
		return a, ctx.Err()
	case StopSignal:
		if !passedOn(a.Signal) { // the workers got SIGTERM; the run reports the signal tpurun got
			return a, &SignalError{Signal: a.Signal, During: "attempt " + strconv.Itoa(n)}
		}
		if a.Failure != nil {
			return a, a.Failure
		}
		return a, nil
	case StopFailure:
		if r.timedOut() {
			return a, fmt.Errorf("%w: the timeout %s expired in attempt %d, while stopping after %v; raise it", ErrTimeout, r.spec.Timeout, n, a.Failure)
		}
		return a, a.Failure
	}
	for _, s := range a.Ranks {
		if s.ResultErr != nil {
			return a, &ResultError{Rank: s.Rank, PID: s.PID, Err: s.ResultErr}
		}
	}
	return a, nil
}

// sweep kills the orphans of the run. With a reaper (PID 1 or subreaper) every orphan is in this process's
// subtree, so it walks exactly that subtree; otherwise, or when the kernel cannot list children, it scans every
// process of the host for the run id (or the sweep tag) in its environment.
func (r *job) sweep() ([]int, error) {
	if r.spec.Reaper != nil {
		swept, err := r.spec.Reaper.Sweep(r.spec.ProcRoot)
		if !errors.Is(err, proc.ErrNoChildrenFile) {
			return swept, err
		}
		r.log.Debug("subtree sweep unavailable, sweeping by environment", zap.Error(err))
	}
	return proc.Sweep(r.spec.ProcRoot, worker.EnvSweepTag, r.spec.SweepTag, syscall.SIGKILL)
}

// cleanup kills what is left of every group, sweeps for orphans (see sweep), drains the pipes within
// the drain timeout and fills in the per-rank summaries.
func (r *job) cleanup(a *Attempt, ws []*child) {
	for _, wk := range ws {
		_ = wk.p.Signal(syscall.SIGKILL)
	}
	swept, err := r.sweep()
	if err != nil {
		r.log.Warn("orphan sweep incomplete", zap.Error(err))
	}
	if len(swept) > 0 {
		r.log.Warn("orphan sweep killed processes that outlived their worker group", zap.Ints("pids", swept))
	}
	a.Swept = swept
	// Drain every pipe to EOF: with the subtree gone every write end is closed, unless a process outside it holds
	// one (see drainReader). Output is never dropped for a slow console; only a stop signal gives up on it.
	for _, wk := range ws {
		wk.idle = r.spec.DrainTimeout
		wk.draining.Store(true)
		for _, f := range wk.readers {
			_ = f.SetReadDeadline(time.Now().Add(wk.idle))
		}
	}
	r.awaitOutput(ws)
	for _, wk := range ws {
		wk.exit = wk.p.Release() // the group is torn down: let the pid go, with the resource usage
	}
	for _, wk := range ws {
		for _, f := range slices.Concat(wk.readers, wk.files) {
			_ = f.Close()
		}
		ex := wk.exit
		s := RankSummary{
			Rank: wk.w.Rank, LocalRank: wk.w.LocalRank, PID: ex.PID, ExitCode: ex.Code, Signal: ex.Signal,
			Wall: ex.Wall, UserCPU: ex.UserCPU, SysCPU: ex.SysCPU, MaxRSS: ex.MaxRSS,
			Sampled: r.sampler.remove(ex.PID), StderrTail: wk.errTail.lines(stderrTailLines),
			ErrorFile: wk.errFile, ResultErr: wk.resErr,
		}
		if r.spec.LogDir == "" {
			s.ErrorFile = "" // it lived in the run's scratch directory, removed at the end: name no path that is gone
		}
		rec, err := readErrorFile(wk.errFile)
		if err != nil {
			r.log.Warn("unreadable TORCHELASTIC_ERROR_FILE", zap.Int("rank", wk.w.Rank), zap.Error(err))
		}
		s.Error = rec
		a.Ranks = append(a.Ranks, s)
	}
}

// stopCause says why a terminating signal stops the run: the signal, or for SIGPIPE (raised by the run itself) the
// console write that failed.
func (r *job) stopCause(s syscall.Signal) string {
	if s == syscall.SIGPIPE {
		for _, c := range []*Console{r.stdout, r.stderr} {
			var oe *OutputError
			if errors.As(c.Err(), &oe) {
				return fmt.Sprintf("writing %s failed (%v)", oe.Stream, oe.Err)
			}
		}
	}
	return "received " + SignalName(s)
}

// hurryWrite is how long one write to the launcher's stdout or stderr may wait for its reader after a second stop
// signal; then the rest of the output is discarded.
const hurryWrite = time.Second

// awaitOutput waits until every worker's output and results have been read and written; a stop signal meanwhile
// (a console nobody reads, a second Ctrl-C) discards what the consoles still hold, so nothing waits for them.
func (r *job) awaitOutput(ws []*child) {
	done := make(chan struct{})
	go func() {
		for _, wk := range ws {
			wk.io.Wait()
		}
		close(done)
	}()
	for {
		select {
		case <-done:
			return
		case sig := <-r.spec.Signals:
			if s, ok := sig.(syscall.Signal); ok && terminating(s) {
				r.log.Warn("received " + SignalName(s) + " while writing the workers' last output: discarding the rest")
				if r.stopSignal == 0 {
					r.stopSignal = s
				}
				r.stdout.Abandon()
				r.stderr.Abandon()
			}
		}
	}
}

// rankLogDir is the directory of w in attempt n, relative to the log directory, as torchrun names it:
// <run-id>_<random>/attempt_<n>/<local rank>.
func (r *job) rankLogDir(n int, w topology.Worker) string {
	return filepath.Join(r.runLogs, "attempt_"+strconv.Itoa(n), strconv.Itoa(w.LocalRank))
}

// makeLogDirs creates every local rank's log directory of attempt n before any worker starts, without following a
// symlink in any component below the log directory: a link planted by a worker of an earlier attempt
// (DIR/<run>_<random>/attempt_1/0 -> /victim) is an *UnsafePathError and nothing of attempt n starts.
func (r *job) makeLogDirs(n int, local []topology.Worker) error {
	if r.spec.LogDir == "" {
		return nil
	}
	for _, w := range local {
		if err := MkdirAllBeneath(r.spec.LogDir, r.rankLogDir(n, w), 0o755); err != nil {
			return fmt.Errorf("rank %d: log directory: %w%s", w.Rank, err, fdLimitHint(err))
		}
	}
	return nil
}

// start starts one worker with its env, pipes and log files.
func (r *job) start(as attemptSpec, attemptDir string, w topology.Worker, exits chan<- *child) (*child, error) {
	n := as.n
	wk := &child{w: w}
	// Without a log dir the error files share the run's one scratch directory: a directory per rank would make
	// mkdir the largest cost of starting hundreds of workers.
	wk.errFile = filepath.Join(r.scratch, "error-"+strconv.Itoa(n)+"-"+strconv.Itoa(w.Rank)+".json")
	rankRel := r.rankLogDir(n, w) // below the log directory; made by makeLogDirs
	if attemptDir != "" {
		wk.errFile = filepath.Join(r.spec.LogDir, rankRel, "error.json")
		// The run's directory is new, but a worker of an earlier attempt can write below it: a file it left at
		// this path must not become this attempt's traceback.
		if err := RemoveBeneath(r.spec.LogDir, filepath.Join(rankRel, "error.json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("rank %d: stale TORCHELASTIC_ERROR_FILE %s: %w", w.Rank, wk.errFile, err)
		}
	}
	rt := Runtime{RunID: r.spec.RunID, Role: r.spec.Role, RestartCount: n, MaxRestarts: r.spec.MaxRestarts,
		MasterAddr: as.masterAddr, MasterPort: as.masterPort, ErrorFile: wk.errFile, SweepTag: r.spec.SweepTag}

	cmd := exec.Command(r.spec.Program[0], ExpandArgs(r.spec.Program[1:], w.LocalRank)...)
	cmd.Env = WorkerEnv(r.spec.Env, as.plan, w, rt)
	cmd.Dir = r.spec.Dir

	var writeEnds []*os.File
	closeAll := func() {
		for _, f := range slices.Concat(writeEnds, wk.readers, wk.files) {
			_ = f.Close()
		}
	}
	for range 3 {
		pr, pw, err := os.Pipe()
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("%w: rank %d: pipe: %w%s", ErrInternal, w.Rank, err, fdLimitHint(err))
		}
		wk.readers = append(wk.readers, pr)
		writeEnds = append(writeEnds, pw)
	}
	cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = writeEnds[0], writeEnds[1], []*os.File{writeEnds[2]}
	if id, err := worker.ChannelID(writeEnds[2]); err == nil { // the clients refuse an fd 3 that is not this pipe
		cmd.Env = append(cmd.Env, worker.EnvResultID+"="+id)
	}

	fwd := make([]*forwarder, 2)
	lr := w.LocalRank
	shown := r.spec.LocalRanksFilter == nil || slices.Contains(r.spec.LocalRanksFilter, lr)
	prefix := r.prefix(w)
	for i, s := range []struct {
		std     Std
		console *Console
		name    string
	}{{StdOut, r.stdout, "stdout.log"}, {StdErr, r.stderr, "stderr.log"}} {
		f := &forwarder{prefix: prefix}
		if shown && (r.spec.Redirects.For(lr)&s.std == 0 || r.spec.Tee.For(lr)&s.std != 0) {
			f.console = s.console
		}
		if attemptDir != "" {
			lf, err := OpenBeneath(r.spec.LogDir, filepath.Join(rankRel, s.name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, logFileMode)
			if err != nil {
				closeAll()
				return nil, fmt.Errorf("rank %d: log file: %w%s", w.Rank, err, fdLimitHint(err)) // unsafe path: 2, else 70
			}
			wk.files = append(wk.files, lf)
			msg := "log file write failed; the rest of this stream goes to the console only, not to the file"
			if f.console == nil {
				msg = "log file write failed; the rest of this stream is lost: it is not shown on the console (redirected or filtered out)"
			}
			f.file = &logWriter{f: lf, warn: func(path string, err error) {
				r.log.Warn(msg, zap.Int("rank", w.Rank), zap.String("file", path), zap.Error(err))
			}}
		}
		fwd[i] = f
	}
	fwd[1].tail = &wk.errTail

	p, err := proc.StartHeld(r.spec.Reaper, cmd, func(*proc.Process) { exits <- wk })
	for _, f := range writeEnds {
		_ = f.Close()
	}
	writeEnds = nil
	if err != nil {
		closeAll()
		return nil, r.startError(err, w.Rank, cmd)
	}
	wk.p = p
	r.sampler.add(p.PID(), w.Rank)
	pid := p.PID()
	for i, f := range fwd {
		wk.io.Go(func() { _ = f.run(drainReader{wk.readers[i], wk}) })
	}
	wk.io.Go(func() {
		res := drainReader{wk.readers[2], wk}
		if as.sink == nil {
			_, _ = io.Copy(io.Discard, res)
			return
		}
		// A violation of the result contract is the collector's to report (its document names each one, with a
		// hint, and decides the exit code); only a sink's other failures are this rank's.
		var violation *results.ContractError
		err := as.sink.Consume(w.Rank, pid, w.Replicas, res)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.As(err, &violation) {
			wk.resErr = err
		}
	})
	return wk, nil
}

// sameWriter reports whether a and b are one writer (comparing them without panicking on uncomparable types).
func sameWriter(a, b io.Writer) bool {
	if a == nil || b == nil {
		return false
	}
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

func sigText(s syscall.Signal) string {
	if s == 0 {
		return ""
	}
	return SignalName(s)
}
