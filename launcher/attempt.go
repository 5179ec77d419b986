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
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

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
	fwd     []*forwarder  // of stdout and stderr, attached once the worker started
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
	d.deadline()
	return d.f.Read(p)
}

func (d drainReader) deadline() {
	if d.wk.draining.Load() {
		_ = d.f.SetReadDeadline(time.Now().Add(d.wk.idle))
	}
}

// readPooled reads what the pipe has into a buffer of readBufs taken only once data (or its end) has arrived: the
// forwarders of hundreds of idle workers hold no buffer while they wait. The caller puts buf back.
func (d drainReader) readPooled() (buf *[]byte, n int, err error) {
	d.deadline()
	rc, err := d.f.SyscallConn()
	if err != nil {
		return nil, 0, err
	}
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		buf = readBufs.Get().(*[]byte)
		for n, rerr = syscall.Read(int(fd), *buf); rerr == syscall.EINTR; n, rerr = syscall.Read(int(fd), *buf) {
		}
		if rerr == syscall.EAGAIN {
			readBufs.Put(buf)
			buf = nil
			return false // wait in the poller
		}
		return true
	})
	switch {
	case err != nil:
		return buf, 0, err
	case rerr != nil:
		return buf, 0, &os.PathError{Op: "read", Path: d.f.Name(), Err: rerr}
	case n <= 0:
		return buf, 0, io.EOF
	}
	return buf, n, nil
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

// The batches of a start: the first small, so that forking begins at once, each next one twice as large up to
// maxBatch, so that a large start costs few hand-offs.
const (
	firstBatch = 4
	maxBatch   = 64
)

// startAll starts the workers, a batch at a time, until all run or the attempt begins to stop; a worker that cannot
// be started stops the attempt. It is a pipeline of two stages: while one batch is forked (by the reaper's forking
// thread) and attached, this goroutine prepares the next. The garbage collector waits until all are started.
func (j *job) startAll(s *supervisor, local []topology.Worker) {
	defer quietGC()()
	l := j.newLaunch(s)
	ready := make(chan *batch, 1)
	type outcome struct {
		started int
		err     error
	}
	done := make(chan outcome, 1)
	var halt atomic.Bool // a batch did not start whole: prepare no more
	go func() {
		var o outcome
		for b := range ready {
			if halt.Load() {
				b.discard()
				continue
			}
			n, err := j.startPrepared(l, b)
			o.started += n
			if err != nil || n < len(b.cmds) {
				o.err = err
				halt.Store(true)
			}
		}
		done <- o
	}()
	for size := firstBatch; len(local) > 0 && !s.stopping.Load() && !halt.Load(); size = min(2*size, maxBatch) {
		b := j.prepareBatch(l, local[:min(len(local), size)])
		local = local[len(b.wks):]
		ready <- b
		if b.err != nil {
			break
		}
	}
	close(ready)
	o := <-done
	if o.err != nil {
		j.ctl.stop(errCause(StopStart, o.err))
	}
	j.log.Info("workers started", zap.Int("attempt", s.as.n), zap.Int("workers", o.started),
		zap.String("master", fmt.Sprintf("%s:%d", s.as.masterAddr, s.as.masterPort)))
}

// batch is a list of workers prepared to start: their commands, pipes and log files.
type batch struct {
	wks       []*child
	cmds      []*exec.Cmd
	writeEnds []*os.File // closed once the batch was started
	err       error      // why the worker after the last of wks could not be prepared (none was started then)
}

// discard closes what b holds: none of it will start.
func (b *batch) discard() {
	for _, f := range b.writeEnds {
		_ = f.Close()
	}
	for _, wk := range b.wks {
		for _, f := range slices.Concat(wk.readers, wk.files) {
			_ = f.Close()
		}
	}
}

// launch is what the start of every worker of one attempt shares, worked out once: the program (looked up in PATH
// once), its arguments when they do not vary by rank, and the parts of the environment every worker gets.
type launch struct {
	sv      *supervisor
	env     *envBuilder
	prog    *exec.Cmd // Path and Err of the program, as exec.Command found it
	args    []string  // the worker's argv when no argument has ${local_rank}; nil otherwise
	stdin   [2]*os.File
	holder0 bool // local rank 0 takes the terminal
}

func (j *job) newLaunch(sv *supervisor) *launch {
	as := sv.as
	rt := Runtime{RunID: j.spec.RunID, Role: j.spec.Role, RestartCount: as.n, MaxRestarts: j.spec.MaxRestarts,
		MasterAddr: as.masterAddr, MasterPort: as.masterPort, SweepTag: j.spec.SweepTag}
	l := &launch{sv: sv, env: newEnvBuilder(j.spec.Env, as.plan, rt), prog: exec.Command(j.spec.Program[0])}
	if !slices.ContainsFunc(j.spec.Program[1:], func(a string) bool { return strings.Contains(a, "${local_rank}") }) {
		l.args = append([]string{j.spec.Program[0]}, j.spec.Program[1:]...)
	}
	l.stdin[0], l.holder0 = j.stdinFor(topology.Worker{LocalRank: 0})
	l.stdin[1], _ = j.stdinFor(topology.Worker{LocalRank: 1})
	return l
}

// prepareBatch prepares the workers ws, each one's command, pipes and log files, until one cannot be (b.err).
func (j *job) prepareBatch(l *launch, ws []topology.Worker) *batch {
	b := &batch{wks: make([]*child, 0, len(ws)), cmds: make([]*exec.Cmd, 0, len(ws))}
	for _, w := range ws {
		wk := &child{w: w}
		cmd, ends, err := j.prepare1(l, wk)
		if err != nil {
			b.err = err
			break
		}
		b.writeEnds = append(b.writeEnds, ends...)
		b.wks = append(b.wks, wk)
		b.cmds = append(b.cmds, cmd)
	}
	return b
}

// startPrepared starts a prepared batch: it forks its workers all in one go (through the reaper's forking threads),
// hands those started to the supervisor at once, and only then attaches their output forwarders and result
// readers. It returns how many started and why one did not (nil with fewer than all: the attempt began to stop).
func (j *job) startPrepared(l *launch, b *batch) (int, error) {
	sv := l.sv
	onExit := make([]func(*proc.Process), len(b.wks))
	for i, wk := range b.wks {
		onExit[i] = func(p *proc.Process) { sv.exits <- exitMsg{wk, p} }
	}
	ps, err := j.startCmds(b.cmds, onExit, func() bool { return !sv.stopping.Load() })
	for _, f := range b.writeEnds {
		_ = f.Close()
	}
	b.writeEnds = nil
	var wks []*child
	var started []*proc.Process
	for i, wk := range b.wks {
		if ps[i] == nil {
			for _, f := range slices.Concat(wk.readers, wk.files) {
				_ = f.Close()
			}
			continue
		}
		j.sampler.add(ps[i].PID(), wk.w.Rank)
		wks, started = append(wks, wk), append(started, ps[i])
	}
	sv.started(wks, started)
	for i, p := range started {
		j.attach(sv, wks[i], p)
	}
	var se *proc.StartError
	switch {
	case errors.As(err, &se):
		return len(started), j.startError(b.wks[se.Index].w, se.Err, b.cmds[se.Index])
	case err != nil:
		return len(started), err
	case len(started) < len(b.cmds):
		return len(started), nil
	}
	return len(started), b.err
}

// startCmds starts cmds through the starter: all in one go where it can (exec'd workers), else one by one. ps has
// one entry per command, nil where it was not started (see proc.StartHeldAll).
func (j *job) startCmds(cmds []*exec.Cmd, onExit []func(*proc.Process), more func() bool) ([]*proc.Process, error) {
	if _, ok := j.starter.(execStarter); ok {
		return proc.StartHeldAll(j.spec.Reaper, cmds, onExit, more)
	}
	ps := make([]*proc.Process, len(cmds))
	for i, cmd := range cmds {
		if !more() {
			break
		}
		p, err := j.starter.start(j.spec.Reaper, cmd, onExit[i])
		if err != nil {
			return ps, &proc.StartError{Index: i, Err: err}
		}
		ps[i] = p
	}
	return ps, nil
}

// prepare1 makes one worker's command, pipes and log files; it returns the write ends, which the caller closes
// once the worker started.
func (j *job) prepare1(l *launch, wk *child) (*exec.Cmd, []*os.File, error) {
	sv := l.sv
	cmd, err := j.command(l, wk)
	if err != nil {
		return nil, nil, err
	}
	logRel := "" // the worker's log directory below the log directory; made by makeLogDirs
	if sv.a.LogDir != "" {
		logRel = j.rankLogDir(sv.as.n, wk.w)
	}
	writeEnds, fwd, err := j.streams(logRel, wk, cmd)
	if err != nil {
		return nil, nil, err
	}
	wk.fwd = fwd
	return cmd, writeEnds, nil
}

// attach starts the goroutines that read a started worker's pipes: its output forwarders and its result reader.
// Each closes its pipe once it has read it to the end (or given up on it): the end of an attempt has that much
// less to do, one worker after the other (release closes whatever is still open).
func (j *job) attach(sv *supervisor, wk *child, p *proc.Process) {
	for i, f := range wk.fwd {
		wk.io.Go(func() {
			_ = f.run(drainReader{wk.readers[i], wk})
			_ = wk.readers[i].Close()
		})
	}
	wk.fwd = nil
	wk.io.Go(func() {
		j.readResults(sv.as.sink, wk, p.PID())
		_ = wk.readers[2].Close()
	})
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
			Sampled: j.sampler.remove(ex.PID), StderrTail: wk.errTail.lines(stderrTailLines),
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

// command is the worker's command: program, environment, working directory, stdin and, for the holder of the
// terminal (local rank 0 when tpurun holds one, see terminal.go), its foreground group.
func (r *job) command(l *launch, wk *child) (*exec.Cmd, error) {
	w, n := wk.w, l.sv.as.n
	// Without a log dir the error files share the run's one scratch directory: a directory per rank would make
	// mkdir the largest cost of starting hundreds of workers.
	wk.errFile = filepath.Join(r.scratch, "error-"+strconv.Itoa(n)+"-"+strconv.Itoa(w.Rank)+".json")
	if l.sv.a.LogDir != "" {
		rankRel := r.rankLogDir(n, w) // below the log directory; made by makeLogDirs
		wk.errFile = filepath.Join(r.spec.LogDir, rankRel, "error.json")
		// The run's directory is new, but a worker of an earlier attempt can write below it: a file it left at
		// this path must not become this attempt's traceback.
		if err := RemoveBeneath(r.spec.LogDir, filepath.Join(rankRel, "error.json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("rank %d: stale TORCHELASTIC_ERROR_FILE %s: %w", w.Rank, wk.errFile, err)
		}
	}
	args := l.args
	if args == nil {
		args = append([]string{r.spec.Program[0]}, ExpandArgs(r.spec.Program[1:], w.LocalRank)...)
	}
	cmd := &exec.Cmd{Path: l.prog.Path, Args: args, Err: l.prog.Err, Env: l.env.env(w, wk.errFile), Dir: r.spec.Dir}
	stdin := l.stdin[min(w.LocalRank, 1)]
	if stdin != nil { // a nil *os.File in the io.Reader would be a bad descriptor, not /dev/null
		cmd.Stdin = stdin
	}
	wk.holder = l.holder0 && w.LocalRank == 0
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
		pr, pw, err := pipe()
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

// pipe makes a pipe for a worker's stream: the read end is ours, in the poller; the write end is the worker's,
// blocking as a program expects its stdout to be, never in the poller (os.Pipe would register it there, only to
// take it out again when the worker is started).
func pipe() (r, w *os.File, err error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETFL, unix.O_NONBLOCK); err != nil {
		_, _ = syscall.Close(p[0]), syscall.Close(p[1])
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	return os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1"), nil
}

// gcQuiet counts the start bursts under way (see quietGC) and keeps the collector's settings from before the first.
var gcQuiet struct {
	sync.Mutex
	bursts  int
	percent int
	limit   int64
}

// quietHeadroom is how much the process's memory may grow during a start burst, at least, before the collector
// runs: far more than a start of thousands of workers allocates.
const quietHeadroom = 64 << 20

// quietGC turns the garbage collector off until the returned function is called: a start burst allocates a little
// for each of many workers, and a collection in the middle of it would only scan what is still in use. It stays off
// while the process's memory at most doubles (by quietHeadroom at least; a memory limit): a long start (a slow
// preloaded interpreter, a loaded host) does not keep every byte the started workers' output costs meanwhile.
// Bursts may overlap (several jobs in one process): the collector runs again once the last one ends.
func quietGC() (restore func()) {
	gcQuiet.Lock()
	if gcQuiet.bursts == 0 {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		used := int64(m.Sys - m.HeapReleased)
		gcQuiet.limit = debug.SetMemoryLimit(-1)
		debug.SetMemoryLimit(min(gcQuiet.limit, used+max(used, quietHeadroom)))
		gcQuiet.percent = debug.SetGCPercent(-1)
	}
	gcQuiet.bursts++
	gcQuiet.Unlock()
	return func() {
		gcQuiet.Lock()
		defer gcQuiet.Unlock()
		if gcQuiet.bursts--; gcQuiet.bursts == 0 {
			debug.SetGCPercent(gcQuiet.percent)
			debug.SetMemoryLimit(gcQuiet.limit)
		}
	}
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
