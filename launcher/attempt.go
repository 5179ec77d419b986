package launcher

import (
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
// run-time values their environment gets, where results go, and who hears of this node's own stop.
type attemptSpec struct {
	n          int // attempt (generation) number: TORCHELASTIC_RESTART_COUNT
	plan       *topology.Plan
	nodeRank   int
	masterAddr string
	masterPort int
	sink       ResultSink
	announce   func(*cause) // called once, on the controller's goroutine, when this node begins to stop; must not block
}

// child is one started worker process of one attempt.
type child struct {
	w       topology.Worker
	p       *proc.Process // set on the controller's goroutine
	holder  bool          // it holds the terminal (local rank 0 with a terminal)
	readers []*os.File    // read ends: stdout, stderr, results
	files   []*os.File    // log files
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
		j.ctl.stop(errCause(StopStart, err)) // nothing started
	} else {
		j.startAll(s, local)
	}
	j.ctl.do(func() { s.feed(event{kind: evStarted}) })
	<-s.settled
	j.release(a, s.ws)
	a.Verdict = s.m.cause.verdict(n, j.spec.Timeout, s.m.escalated)
	if a.Verdict.Reason == StopDone {
		for _, r := range a.Ranks {
			if r.ResultErr != nil {
				err := &ResultError{Rank: r.Rank, PID: r.PID, Err: r.ResultErr}
				a.Verdict = &Verdict{Reason: StopDone, Code: ExitCode(err), Node: -1, Err: err}
				break
			}
		}
	}
	return a
}

// startAll starts the workers one by one until all run or the attempt begins to stop; a worker that cannot be
// started stops the attempt.
func (j *job) startAll(s *supervisor, local []topology.Worker) {
	started := 0
	for _, w := range local {
		if s.stopping.Load() {
			break
		}
		if err := j.start(s, w); err != nil {
			j.ctl.stop(errCause(StopStart, err))
			break
		}
		started++
	}
	j.log.Info("workers started", zap.Int("attempt", s.as.n), zap.Int("workers", started),
		zap.String("master", fmt.Sprintf("%s:%d", s.as.masterAddr, s.as.masterPort)))
}

// release lets every held zombie be reaped (with its resource usage), closes the pipes and log files and fills
// in the per-rank summaries.
func (j *job) release(a *Attempt, ws []*child) {
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
			Sampled: j.sampler.remove(ex.PID), StderrTail: wk.errTail.lines(stderrTailLines),
			ErrorFile: wk.errFile, ResultErr: wk.resErr,
		}
		if j.spec.LogDir == "" {
			s.ErrorFile = "" // it lived in the run's scratch directory, removed at the end: name no path that is gone
		}
		rec, err := readErrorFile(wk.errFile)
		if err != nil {
			j.log.Warn("unreadable TORCHELASTIC_ERROR_FILE", zap.Int("rank", wk.w.Rank), zap.Error(err))
		}
		s.Error = rec
		a.Ranks = append(a.Ranks, s)
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

// start starts one worker with its env, stdin, pipes and log files, and hands it to the supervisor. Local rank 0
// takes the terminal when tpurun holds one (see terminal.go).
func (r *job) start(sv *supervisor, w topology.Worker) error {
	wk := &child{w: w}
	cmd, err := r.command(sv.as, sv.a.LogDir, wk)
	if err != nil {
		return err
	}
	logRel := "" // the worker's log directory below the log directory; made by makeLogDirs
	if sv.a.LogDir != "" {
		logRel = r.rankLogDir(sv.as.n, w)
	}
	writeEnds, fwd, err := r.streams(logRel, wk, cmd)
	if err != nil {
		return err
	}
	p, err := r.starter.start(r.spec.Reaper, cmd, func(p *proc.Process) { sv.exits <- exitMsg{wk, p} })
	for _, f := range writeEnds {
		_ = f.Close()
	}
	if err != nil {
		for _, f := range slices.Concat(wk.readers, wk.files) {
			_ = f.Close()
		}
		return r.startError(w, err, cmd)
	}
	r.sampler.add(p.PID(), w.Rank)
	sv.started(wk, p)
	for i, f := range fwd {
		wk.io.Go(func() { _ = f.run(drainReader{wk.readers[i], wk}) })
	}
	wk.io.Go(func() { r.readResults(sv.as.sink, wk, p.PID()) })
	return nil
}

// command is the worker's command: program, environment, working directory, stdin and, for the holder of the
// terminal, its foreground group.
func (r *job) command(as attemptSpec, attemptDir string, wk *child) (*exec.Cmd, error) {
	w, n := wk.w, as.n
	// Without a log dir the error files share the run's one scratch directory: a directory per rank would make
	// mkdir the largest cost of starting hundreds of workers.
	wk.errFile = filepath.Join(r.scratch, "error-"+strconv.Itoa(n)+"-"+strconv.Itoa(w.Rank)+".json")
	if attemptDir != "" {
		rankRel := r.rankLogDir(n, w) // below the log directory; made by makeLogDirs
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
	stdin, holder := r.stdinFor(w)
	if stdin != nil { // a nil *os.File in the io.Reader would be a bad descriptor, not /dev/null
		cmd.Stdin = stdin
	}
	wk.holder = holder
	if wk.holder { // its group becomes the terminal's foreground group, in the child before exec (no SIGTTOU)
		cmd.SysProcAttr = &syscall.SysProcAttr{Foreground: true, Ctty: r.term.fd}
	}
	return cmd, nil
}

// streams makes the worker's three pipes (stdout, stderr, results: fd 3) and its log files, and the forwarders of
// stdout and stderr; it returns the write ends, which the caller closes once the worker started.
func (r *job) streams(logRel string, wk *child, cmd *exec.Cmd) ([]*os.File, []*forwarder, error) {
	w := wk.w
	var writeEnds []*os.File
	fail := func(err error) ([]*os.File, []*forwarder, error) {
		for _, f := range slices.Concat(writeEnds, wk.readers, wk.files) {
			_ = f.Close()
		}
		return nil, nil, err
	}
	for range 3 {
		pr, pw, err := os.Pipe()
		if err != nil {
			return fail(fmt.Errorf("%w: rank %d: pipe: %w%s", ErrInternal, w.Rank, err, fdLimitHint(err)))
		}
		wk.readers = append(wk.readers, pr)
		writeEnds = append(writeEnds, pw)
	}
	cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = writeEnds[0], writeEnds[1], []*os.File{writeEnds[2]}
	if id, err := worker.ChannelID(writeEnds[2]); err == nil { // the clients refuse an fd 3 that is not this pipe
		cmd.Env = append(cmd.Env, worker.EnvResultID+"="+id)
	}
	fwd := make([]*forwarder, 2)
	for i, s := range []struct {
		std     Std
		console *Console
		name    string
	}{{StdOut, r.stdout, "stdout.log"}, {StdErr, r.stderr, "stderr.log"}} {
		f, err := r.forwarder(logRel, wk, s.std, s.console, s.name)
		if err != nil {
			return fail(err)
		}
		fwd[i] = f
	}
	fwd[1].tail = &wk.errTail
	return writeEnds, fwd, nil
}

// forwarder is the forwarder of one of the worker's streams: to the console unless redirected or filtered out,
// to its log file below logRel with a log directory.
func (r *job) forwarder(logRel string, wk *child, std Std, console *Console, name string) (*forwarder, error) {
	w, lr := wk.w, wk.w.LocalRank
	shown := r.spec.LocalRanksFilter == nil || slices.Contains(r.spec.LocalRanksFilter, lr)
	f := &forwarder{prefix: r.prefix(w)}
	if shown && (r.spec.Redirects.For(lr)&std == 0 || r.spec.Tee.For(lr)&std != 0) {
		f.console = console
	}
	if logRel == "" {
		return f, nil
	}
	lf, err := OpenBeneath(r.spec.LogDir, filepath.Join(logRel, name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, logFileMode)
	if err != nil {
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
	return f, nil
}

// startError is the error of a worker that could not be started: PROGRAM unusable at exec (126/127), the
// preloaded interpreter's refusal to fork (a *ConfigError, 2), arguments and environment too big for execve (the
// user's to trim: argListError), else internal.
func (r *job) startError(w topology.Worker, err error, cmd *exec.Cmd) error {
	var ce *ConfigError
	if errors.As(err, &ce) { // the preloaded interpreter refused to fork: exit 2
		return err
	}
	for _, e := range []error{syscall.ENOENT, syscall.EACCES, syscall.ENOEXEC} {
		if errors.Is(err, e) {
			return &ProgramError{Program: r.spec.Program[0], Err: err, AtExec: true}
		}
	}
	if errors.Is(err, syscall.E2BIG) {
		return argListError(w.Rank, cmd.Args, cmd.Env)
	}
	return fmt.Errorf("%w: rank %d: %w%s", ErrInternal, w.Rank, err, fdLimitHint(err))
}

// readResults reads the worker's result channel into the sink (or discards it without one). A violation of the
// result contract is the collector's to report (its document names each one, with a hint, and decides the exit
// code); only a sink's other failures are this rank's.
func (r *job) readResults(sink ResultSink, wk *child, pid int) {
	res := drainReader{wk.readers[2], wk}
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
