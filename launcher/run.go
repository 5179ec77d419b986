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
	"syscall"
	"time"

	"go.uber.org/zap"

	"tpurun/launcher/proc"
	"tpurun/launcher/results"
	"tpurun/launcher/topology"
)

// stderrTailLines is how many last stderr lines of a failed rank the report shows.
const stderrTailLines = 10

// Run starts the local workers of cfg.Plan, supervises them until every one is gone, restarts the group after a
// failure up to cfg.MaxRestarts times, and returns the report. The error is nil when every worker exited 0 (and
// no result sink complained); otherwise a *WorkerError for the first worker that failed, ErrTimeout, a
// *ResultError, a *ConfigError (nothing started), or the context's error. ExitCode maps it to tpurun's code.
// When Run returns, no process of the run is left: every group got SIGKILL and the orphan sweep ran.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	givenLogDir := cfg.LogDir
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.MasterPort == 0 {
		if cfg.MasterPort, err = FreePort(cfg.MasterAddr); err != nil {
			return nil, fmt.Errorf("%w: MASTER_PORT: %w; pass a port explicitly", ErrInternal, err)
		}
	}
	r := &run{
		cfg:     cfg,
		log:     cfg.Logger.With(zap.String("run_id", cfg.RunID)),
		stdout:  &lockedWriter{w: cfg.Stdout},
		sampler: newSampler(cfg.SampleInterval, cfg.OnSample),
	}
	r.stderr = r.stdout // one lock when both are one writer (--json): lines of the two streams never interleave
	if !sameWriter(cfg.Stdout, cfg.Stderr) {
		r.stderr = &lockedWriter{w: cfg.Stderr}
	}
	if cfg.LogDir != "" && givenLogDir == "" {
		r.log.Info("worker logs (--redirects/--tee without --log-dir: a new private directory)",
			zap.String("dir", filepath.Join(cfg.LogDir, cfg.RunID)))
	} else if cfg.LogDir != "" {
		r.log.Info("worker logs", zap.String("dir", filepath.Join(cfg.LogDir, cfg.RunID)))
	} else {
		d, err := os.MkdirTemp("", "tpurun-"+cfg.RunID+"-")
		if err != nil {
			return nil, fmt.Errorf("%w: directory for TORCHELASTIC_ERROR_FILE: %w; set TMPDIR or --log-dir", ErrInternal, err)
		}
		defer os.RemoveAll(d)
		r.scratch = d
	}
	sctx, stopSampler := context.WithCancel(ctx)
	var swg sync.WaitGroup
	swg.Go(func() { r.sampler.run(sctx) })
	defer func() {
		stopSampler()
		swg.Wait()
	}()

	if cfg.Timeout > 0 {
		t := time.NewTimer(cfg.Timeout)
		defer t.Stop()
		r.timeout = t.C
	}
	rep := &Report{RunID: cfg.RunID}
	for n := 0; ; n++ {
		a, err := r.attempt(ctx, n)
		rep.Attempts = append(rep.Attempts, a)
		if err != nil {
			return rep, err
		}
		switch a.Reason {
		case StopTimeout:
			return rep, fmt.Errorf("%w: --timeout %s expired in attempt %d; raise --timeout or find the hung rank", ErrTimeout, cfg.Timeout, n)
		case StopCanceled:
			return rep, ctx.Err()
		case StopSignal:
			if a.Failure != nil {
				return rep, a.Failure
			}
			return rep, nil
		case StopFailure:
			if n >= cfg.MaxRestarts || r.stopRequested() {
				return rep, a.Failure
			}
			// The timeout or the context may have ended the run while this attempt was being torn down.
			if r.timedOut() {
				r.log.Warn("not restarting: --timeout expired", zap.Duration("timeout", cfg.Timeout))
				return rep, fmt.Errorf("%w: --timeout %s expired in attempt %d, while stopping after %v; raise --timeout",
					ErrTimeout, cfg.Timeout, n, a.Failure)
			}
			if err := ctx.Err(); err != nil {
				r.log.Warn("not restarting: the run was canceled", zap.Error(err))
				return rep, err
			}
			r.log.Warn("restarting the whole group", zap.Int("failed_attempt", n), zap.Int("next_attempt", n+1),
				zap.Int("max_restarts", cfg.MaxRestarts), zap.Error(a.Failure))
			continue
		}
		for _, s := range a.Ranks {
			if s.ResultErr != nil {
				return rep, &ResultError{Rank: s.Rank, PID: s.PID, Err: s.ResultErr}
			}
		}
		return rep, nil
	}
}

// run is the state of one Run shared by its attempts.
type run struct {
	cfg            Config
	log            *zap.Logger
	stdout, stderr *lockedWriter // the same one when Stdout and Stderr are one writer
	sampler        *sampler
	scratch        string           // holds the error files when there is no log dir
	sink           ResultSink       // the current attempt's result sink
	timeout        <-chan time.Time // the run's --timeout; nil when none, or once it fired
	expired        bool             // the --timeout fired, whatever the attempt was doing
	stopSignal     syscall.Signal   // a terminating signal that arrived while an attempt was stopping for another reason
}

// timedOut reports whether the run's --timeout has expired, also between attempts.
func (r *run) timedOut() bool {
	if !r.expired && r.timeout != nil {
		select {
		case <-r.timeout:
			r.timeout, r.expired = nil, true
		default:
		}
	}
	return r.expired
}

// stopRequested reports whether a terminating signal arrived while the last attempt was stopping for another
// reason, or while it was being cleaned up; a forwarding-only signal (SIGUSR1/2) that arrived then is dropped,
// there being no worker to forward it to.
func (r *run) stopRequested() bool {
	if r.stopSignal != 0 {
		r.log.Warn("not restarting: received " + SignalName(r.stopSignal) + " while stopping the failed attempt")
		return true
	}
	for {
		select {
		case sig := <-r.cfg.Signals:
			switch sig {
			case syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT:
				r.log.Warn("not restarting: received " + sig.String())
				return true
			}
		default:
			return false
		}
	}
}

// worker is one started process of one attempt.
type worker struct {
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
}

// attempt starts every local worker once and supervises them until all have been reaped, the groups killed and
// the orphans swept. Exits, signals, the timeout and the grace timer are events on one select: nothing polls.
func (r *run) attempt(ctx context.Context, n int) (*Attempt, error) {
	local := r.cfg.Plan.Local(r.cfg.NodeRank)
	a := &Attempt{Number: n, Reason: StopDone}
	if r.cfg.OnAttempt != nil {
		r.cfg.OnAttempt(n)
	}
	r.sink = r.cfg.Results
	if r.cfg.NewResults != nil {
		r.sink = r.cfg.NewResults(n)
	}
	if r.cfg.LogDir != "" {
		a.LogDir = filepath.Join(r.cfg.LogDir, r.cfg.RunID, "attempt_"+strconv.Itoa(n))
	}
	exits := make(chan *worker, len(local))
	ws := make([]*worker, 0, len(local))
	var startErr error
	for _, w := range local {
		wk, err := r.start(n, a.LogDir, w, exits)
		if err != nil {
			startErr = err
			break
		}
		ws = append(ws, wk)
	}
	r.log.Info("workers started", zap.Int("attempt", n), zap.Int("workers", len(ws)),
		zap.String("master", fmt.Sprintf("%s:%d", r.cfg.MasterAddr, r.cfg.MasterPort)))

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
			zap.Duration("grace", r.cfg.Grace))
		signalAll(sig)
		grace = time.NewTimer(r.cfg.Grace)
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
			wk.exit = wk.p.Wait()
			r.sampler.exited(wk.exit.PID)
			ex := wk.exit
			a.EndOrder = append(a.EndOrder, wk.w.Rank)
			r.log.Debug("worker exited", zap.Int("rank", wk.w.Rank), zap.Int("pid", ex.PID),
				zap.Int("code", ex.Code), zap.String("signal", sigText(ex.Signal)), zap.Duration("wall", ex.Wall))
			if !ex.Success() && a.Failure == nil && (!stopping || a.Reason == StopSignal) {
				a.Failure = &WorkerError{Rank: wk.w.Rank, PID: ex.PID, Attempt: n, ExitCode: ex.Code, Signal: ex.Signal, Wall: ex.Wall}
				r.log.Error("worker failed", zap.Int("rank", wk.w.Rank), zap.Int("pid", ex.PID), zap.Int("attempt", n),
					zap.Int("code", ex.Code), zap.String("signal", sigText(ex.Signal)))
				if r.cfg.OnFailure != nil {
					r.cfg.OnFailure(a.Failure)
				}
				beginStop(StopFailure, syscall.SIGTERM)
			}
		case sig := <-r.cfg.Signals:
			s, ok := sig.(syscall.Signal)
			if !ok {
				continue
			}
			switch s {
			case syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT:
				if !stopping {
					a.Signal = s
					beginStop(StopSignal, s)
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
					r.log.Warn("second " + SignalName(s) + ": killing every worker now")
					signalAll(syscall.SIGKILL)
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
			r.log.Warn("grace period over: SIGKILL to every worker group", zap.Duration("grace", r.cfg.Grace))
			signalAll(syscall.SIGKILL)
		}
	}
	if grace != nil {
		grace.Stop()
	}
	r.cleanup(a, ws)
	return a, startErr
}

// sweep kills the orphans of the run. With a reaper (PID 1 or subreaper) every orphan is in this process's
// subtree, so it walks exactly that subtree; otherwise, or when the kernel cannot list children, it scans every
// process of the host for the run id (or the sweep tag) in its environment.
func (r *run) sweep() ([]int, error) {
	if r.cfg.Reaper != nil {
		swept, err := r.cfg.Reaper.Sweep(r.cfg.ProcRoot)
		if !errors.Is(err, proc.ErrNoChildrenFile) {
			return swept, err
		}
		r.log.Debug("subtree sweep unavailable, sweeping by environment", zap.Error(err))
	}
	key, val := "TPURUN_RUN_ID", r.cfg.RunID
	if r.cfg.SweepTag != "" {
		key, val = sweepTagEnv, r.cfg.SweepTag
	}
	return proc.Sweep(r.cfg.ProcRoot, key, val, syscall.SIGKILL)
}

// cleanup kills what is left of every group, sweeps for orphans (see sweep), drains the pipes within
// the drain timeout and fills in the per-rank summaries.
func (r *run) cleanup(a *Attempt, ws []*worker) {
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
	deadline := time.Now().Add(r.cfg.DrainTimeout)
	for _, wk := range ws {
		for _, f := range wk.readers {
			_ = f.SetReadDeadline(deadline)
		}
	}
	for _, wk := range ws {
		wk.io.Wait()
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
		rec, err := readErrorFile(wk.errFile)
		if err != nil {
			r.log.Warn("unreadable TORCHELASTIC_ERROR_FILE", zap.Int("rank", wk.w.Rank), zap.Error(err))
		}
		s.Error = rec
		a.Ranks = append(a.Ranks, s)
	}
}

// start starts one worker with its env, pipes and log files.
func (r *run) start(n int, attemptDir string, w topology.Worker, exits chan<- *worker) (*worker, error) {
	wk := &worker{w: w}
	// Without a log dir the error files share the run's one scratch directory: a directory per rank would make
	// mkdir the largest cost of starting hundreds of workers.
	wk.errFile = filepath.Join(r.scratch, "error-"+strconv.Itoa(n)+"-"+strconv.Itoa(w.Rank)+".json")
	rankDir := filepath.Join(attemptDir, strconv.Itoa(w.Rank))
	if attemptDir != "" {
		if err := os.MkdirAll(rankDir, 0o755); err != nil {
			return nil, fmt.Errorf("%w: rank %d: log directory %s: %w", ErrInternal, w.Rank, rankDir, err)
		}
		wk.errFile = filepath.Join(rankDir, "error.json")
		// A fixed --run-id repeats this path: a previous run's traceback must not become this one's. (The scratch
		// directory is new for every run.)
		if err := os.Remove(wk.errFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: rank %d: stale TORCHELASTIC_ERROR_FILE %s: %w", ErrInternal, w.Rank, wk.errFile, err)
		}
	}
	rt := Runtime{RunID: r.cfg.RunID, Role: r.cfg.Role, RestartCount: r.cfg.PriorRestarts + n,
		MaxRestarts: max(r.cfg.MaxRestarts, r.cfg.WorldMaxRestarts),
		MasterAddr:  r.cfg.MasterAddr, MasterPort: r.cfg.MasterPort, ErrorFile: wk.errFile}

	cmd := exec.Command(r.cfg.Program[0], ExpandArgs(r.cfg.Program[1:], w.LocalRank)...)
	cmd.Env = WorkerEnv(r.cfg.Env, r.cfg.Plan, w, rt)
	if r.cfg.SweepTag != "" {
		cmd.Env = withSweepTag(cmd.Env, r.cfg.SweepTag)
	}
	cmd.Dir = r.cfg.Dir

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

	fwd := make([]*forwarder, 2)
	lr := w.LocalRank
	shown := r.cfg.LocalRanksFilter == nil || slices.Contains(r.cfg.LocalRanksFilter, lr)
	prefix := []byte(Prefix(r.cfg.LogPrefix, w.Rank, lr, w.NodeRank, r.cfg.Role))
	for i, s := range []struct {
		std     Std
		console *lockedWriter
		name    string
	}{{StdOut, r.stdout, "stdout.log"}, {StdErr, r.stderr, "stderr.log"}} {
		f := &forwarder{prefix: prefix}
		if shown && (r.cfg.Redirects.For(lr)&s.std == 0 || r.cfg.Tee.For(lr)&s.std != 0) {
			f.console = s.console
		}
		if attemptDir != "" {
			lf, err := createLogFile(filepath.Join(rankDir, s.name))
			if err != nil {
				closeAll()
				return nil, fmt.Errorf("%w: rank %d: log file: %w%s", ErrInternal, w.Rank, err, fdLimitHint(err))
			}
			wk.files = append(wk.files, lf)
			msg := "log file write failed; the rest of this stream goes to the console only, not to the file"
			if f.console == nil {
				msg = "log file write failed; the rest of this stream is lost: it is not shown on the console (--redirects, --local-ranks-filter)"
			}
			f.file = &logWriter{f: lf, warn: func(path string, err error) {
				r.log.Warn(msg, zap.Int("rank", w.Rank), zap.String("file", path), zap.Error(err))
			}}
		}
		fwd[i] = f
	}
	fwd[1].tail = &wk.errTail

	p, err := proc.StartWith(r.cfg.Reaper, cmd, func(*proc.Process) { exits <- wk })
	for _, f := range writeEnds {
		_ = f.Close()
	}
	writeEnds = nil
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("%w: rank %d: %w%s", ErrInternal, w.Rank, err, fdLimitHint(err))
	}
	wk.p = p
	r.sampler.add(p.PID(), w.Rank)
	pid := p.PID()
	for i, f := range fwd {
		wk.io.Go(func() { _ = f.run(wk.readers[i]) })
	}
	wk.io.Go(func() {
		res := wk.readers[2]
		if r.sink == nil {
			_, _ = io.Copy(io.Discard, res)
			return
		}
		// A violation of the result contract is the collector's to report (its document names each one, with a
		// hint, and decides the exit code); only a sink's other failures are this rank's.
		var violation *results.ContractError
		err := r.sink.Consume(w.Rank, pid, w.Replicas, res)
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
