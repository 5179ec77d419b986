package attempt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/shirou/gopsutil/v3/process"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/proc"
	"tpurun/internal/safepath"
	"tpurun/internal/setting"
	"tpurun/internal/stop"
	"tpurun/internal/topology"
	"tpurun/internal/workerenv"
	"tpurun/worker"
)

// The batches of a start: the first small, so that forking begins at once (while the descriptor table grows, as
// many as its room holds), each next one twice as large up to maxBatch, so that a large start costs few hand-offs.
const (
	firstBatch = 4
	maxBatch   = 64
	// fdsKept and fdsAtMost are the descriptors one worker has open in this process: from its start on (three pipes'
	// read ends and its pidfd), and at most, while it is being started (their write ends, two log files).
	fdsKept   = 4
	fdsAtMost = 9
)

// ReserveAhead begins, on another thread, the growth of the descriptor table that a start of n workers will need
// (see startAll), as soon as the command line says how many this host starts (--nprocs; n <= 0: it does not): its
// grace period (7-31 ms, docs/BENCHMARKS.md) then passes while the run is set up (the signals caught, detection,
// the rendezvous) rather than just before the first fork. It returns at once; startAll then finds the room made.
func ReserveAhead(n int) {
	if n > 0 {
		_, _ = reserveFor(n)
	}
}

// reserveFor reserves room in the descriptor table for a start of n workers (proc.ReserveFDsAhead): each keeps
// three pipes' read ends and a pidfd, and holds the write ends and its log files until it has started; 16 more for
// what the start itself opens meanwhile. room is the table's as it is (see proc.ReserveFDsAhead).
func reserveFor(n int) (begun <-chan struct{}, room int) {
	return proc.ReserveFDsAhead(fdsKept*n, fdsAtMost*n+16)
}

// Starter starts one worker process of an attempt, held (see proc.StartHeld), otherwise than by exec: forked from
// the preloaded interpreter (--preload). cmd has its Path, Args, Env, Dir, stdio and ExtraFiles set.
type Starter interface {
	Start(rp *proc.Reaper, cmd *exec.Cmd, onExit func(*proc.Process)) (*proc.Process, error)
}

// startAll starts the workers, a batch at a time, until all run or the attempt begins to stop; a worker that cannot
// be started stops the attempt. It is a pipeline of two stages: while one batch is forked (by the reaper's forking
// thread) and attached, this goroutine prepares the next. The garbage collector waits until all are started.
func (r *Runner) startAll(s *supervisor, local []topology.Worker) {
	defer quietGC()()
	// Room in the descriptor table for the whole burst, made in one step unless ReserveAhead made it. Made on another
	// thread: the first batch is as many workers as the table holds as it is (fdsAtMost each; 4 at least), prepared
	// and forked meanwhile, and past it whatever needs a descriptor past the table's end waits for the growth under
	// way (this one, or ReserveAhead's).
	growing, room := reserveFor(len(local))
	first := firstBatch
	if growing != nil {
		first = min(max(firstBatch, room/fdsAtMost), maxBatch)
		r.Log.Debug("growing the descriptor table for the start", zap.Int("workers", len(local)), zap.Int("first", first))
	}
	l := r.newLaunch(s)
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
			n, err := r.startPrepared(l, b)
			o.started += n
			if err != nil || n < len(b.cmds) {
				o.err = err
				halt.Store(true)
			}
		}
		done <- o
	}()
	for size := first; len(local) > 0 && !s.stopping.Load() && !halt.Load(); size = min(2*size, maxBatch) {
		b := r.prepareBatch(l, local[:min(len(local), size)])
		local = local[len(b.wks):]
		ready <- b
		if b.err != nil {
			break
		}
		if growing != nil {
			<-growing // the growth is under way before the next batch can go past the table's end
			growing = nil
		}
	}
	close(ready)
	o := <-done
	if o.err != nil {
		r.Ctl.Stop(stop.ErrCause(stop.Start, o.err))
	}
	r.Log.Info("workers started", zap.Int("attempt", s.as.N), zap.Int("workers", o.started),
		zap.String("master", fmt.Sprintf("%s:%d", s.as.MasterAddr, s.as.MasterPort)))
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
	l.stdin[0], l.relay0 = r.stdinFor(topology.Worker{LocalRank: 0})
	l.stdin[1], _ = r.stdinFor(topology.Worker{LocalRank: 1})
	for i, c := range []*console.Console{r.Stdout, r.Stderr} {
		l.tty[i] = c != nil && c.Terminal()
	}
	if l.relay0 || l.tty[0] || l.tty[1] {
		l.ws = r.windowSize()
	}
	return l
}

// prepareBatch prepares the workers ws, each one's command, pipes and log files, until one cannot be (b.err).
func (r *Runner) prepareBatch(l *launch, ws []topology.Worker) *batch {
	b := &batch{wks: make([]*child, 0, len(ws)), cmds: make([]*exec.Cmd, 0, len(ws))}
	for _, w := range ws {
		wk := &child{w: w}
		cmd, ends, err := r.prepare1(l, wk)
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
func (r *Runner) startPrepared(l *launch, b *batch) (int, error) {
	sv := l.sv
	onExit := make([]func(*proc.Process), len(b.wks))
	for i, wk := range b.wks {
		onExit[i] = func(p *proc.Process) { sv.exits <- func() { sv.exited(wk, p) } }
	}
	forked := r.Ctl.StartGate(sv.stopping.Load) // not while job control holds the job stopped
	defer forked()                              // once the supervisor has them: a job-control stop stops them
	ps, err := r.startCmds(b.cmds, onExit, func() bool { return !sv.stopping.Load() })
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
		r.Sampler.add(ps[i].PID(), wk.w.Rank)
		wks, started = append(wks, wk), append(started, ps[i])
	}
	sv.started(wks, started)
	for i, p := range started {
		r.attach(sv, wks[i], p)
	}
	var se *proc.StartError
	switch {
	case errors.As(err, &se):
		return len(started), r.startError(b.wks[se.Index].w, se.Err, b.cmds[se.Index])
	case err != nil:
		return len(started), err
	case len(started) < len(b.cmds):
		return len(started), nil
	}
	return len(started), b.err
}

// startCmds starts cmds through the starter: all in one go where it can (exec'd workers), else one by one. ps has
// one entry per command, nil where it was not started (see proc.StartHeldAll).
func (r *Runner) startCmds(cmds []*exec.Cmd, onExit []func(*proc.Process), more func() bool) ([]*proc.Process, error) {
	if r.Starter == nil {
		return proc.StartHeldAll(r.Reaper, cmds, onExit, more)
	}
	ps := make([]*proc.Process, len(cmds))
	for i, cmd := range cmds {
		if !more() {
			break
		}
		p, err := r.Starter.Start(r.Reaper, cmd, onExit[i])
		if err != nil {
			return ps, &proc.StartError{Index: i, Err: err}
		}
		ps[i] = p
	}
	return ps, nil
}

// prepare1 makes one worker's command, pipes and log files; it returns the write ends, which the caller closes
// once the worker started.
func (r *Runner) prepare1(l *launch, wk *child) (*exec.Cmd, []*os.File, error) {
	sv := l.sv
	cmd, err := r.command(l, wk)
	if err != nil {
		return nil, nil, err
	}
	logRel := "" // the worker's log directory below the log directory; made by makeLogDirs
	if sv.a.LogDir != "" {
		logRel = r.rankLogDir(sv.as.N, wk.w)
	}
	writeEnds, err := r.streams(l, logRel, wk, cmd)
	if err != nil {
		return nil, nil, err
	}
	return cmd, writeEnds, nil
}

// attach starts the goroutines that read a started worker's pipes: its output forwarders and its result reader.
// Each closes its pipe once it has read it to the end (or given up on it): the end of an attempt has that much
// less to do, one worker after the other (release closes whatever is still open, pseudo-terminals among it).
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
		readResults(sv.as.Sink, wk, p.PID())
		_ = wk.readers[2].Close()
	})
}

// rankLogDir is the directory of w in attempt n, relative to the log directory, as torchrun names it:
// <run-id>_<random>/attempt_<n>/<local rank>.
func (r *Runner) rankLogDir(n int, w topology.Worker) string {
	return filepath.Join(r.RunLogs, "attempt_"+strconv.Itoa(n), strconv.Itoa(w.LocalRank))
}

// makeLogDirs creates every local rank's log directory of attempt n before any worker starts, without following a
// symlink in any component below the log directory: a link planted by a worker of an earlier attempt
// (DIR/<run>_<random>/attempt_1/0 -> /victim) is an *UnsafePathError and nothing of attempt n starts.
func (r *Runner) makeLogDirs(n int, local []topology.Worker) error {
	if r.LogDir == "" {
		return nil
	}
	for _, w := range local {
		if err := safepath.MkdirAllBeneath(r.LogDir, r.rankLogDir(n, w), 0o755); err != nil {
			return fmt.Errorf("rank %d: log directory: %w%s", w.Rank, err, proc.FDLimitHint(err))
		}
	}
	return nil
}

// command is the worker's command: program, environment, working directory and stdin (but a terminal's: see
// terminalInput).
func (r *Runner) command(l *launch, wk *child) (*exec.Cmd, error) {
	w, n := wk.w, l.sv.as.N
	// Without a log dir the error files share the run's one scratch directory: a directory per rank would make
	// mkdir the largest cost of starting hundreds of workers.
	wk.errFile = filepath.Join(r.Scratch, "error-"+strconv.Itoa(n)+"-"+strconv.Itoa(w.Rank)+".json")
	if l.sv.a.LogDir != "" {
		rankRel := r.rankLogDir(n, w) // below the log directory; made by makeLogDirs
		wk.errFile = filepath.Join(r.LogDir, rankRel, "error.json")
		// The run's directory is new, but a worker of an earlier attempt can write below it: a file it left at
		// this path must not become this attempt's traceback.
		if err := safepath.RemoveBeneath(r.LogDir, filepath.Join(rankRel, "error.json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("rank %d: stale TORCHELASTIC_ERROR_FILE %s: %w", w.Rank, wk.errFile, err)
		}
	}
	args := l.args
	if args == nil {
		args = append([]string{r.Program[0]}, workerenv.ExpandArgs(r.Program[1:], w.LocalRank)...)
	}
	cmd := &exec.Cmd{Path: l.prog.Path, Args: args, Err: l.prog.Err, Env: l.env.Env(w, wk.errFile), Dir: r.Dir}
	stdin := l.stdin[min(w.LocalRank, 1)]
	if stdin != nil { // a nil *os.File in the io.Reader would be a bad descriptor, not /dev/null
		cmd.Stdin = stdin
	}
	return cmd, nil
}

// streams makes the worker's stdout, stderr and results (fd 3) ends, its log files and the forwarders of stdout
// and stderr: for a stream shown at a terminal a pseudo-terminal, else a pipe; the results a pipe. With one, the
// worker leads a session of its own whose controlling terminal it is: its stderr's, else its stdout's (its stdin's
// too when it reads the terminal). It returns the worker's ends, which the caller closes once the worker started.
func (r *Runner) streams(l *launch, logRel string, wk *child, cmd *exec.Cmd) ([]*os.File, error) {
	w := wk.w
	var writeEnds []*os.File
	fail := func(err error) ([]*os.File, error) {
		for _, f := range slices.Concat(writeEnds, wk.readers, wk.files) {
			_ = f.Close()
		}
		return nil, err
	}
	writeEnds, ctty, master, err := r.outputEnds(l, wk)
	if err != nil {
		return fail(err)
	}
	cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = writeEnds[0], writeEnds[1], []*os.File{writeEnds[2]}
	if id, err := worker.ChannelID(writeEnds[2]); err == nil { // the clients refuse an fd 3 that is not this pipe
		cmd.Env = append(cmd.Env, worker.EnvResultID+"="+id)
	}
	if err := r.forwarders(logRel, wk); err != nil {
		return fail(err)
	}
	if l.relay0 && w.LocalRank == 0 {
		writeEnds = append(writeEnds, r.terminalInput(l, wk, cmd)...)
		if cmd.Stdin != nil {
			ctty, master = 0, wk.input
		}
	}
	if ctty >= 0 && r.Starter == nil { // the preloaded interpreter forks its workers into a group of its session
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: ctty}
		wk.ctty = master
	}
	return writeEnds, nil
}

// outputEnds makes the worker's stdout, stderr and results ends (see streams), the launcher's in wk.readers; ctty
// is the worker's descriptor of its controlling terminal (-1: none) and master tpurun's end of it.
func (r *Runner) outputEnds(l *launch, wk *child) (writeEnds []*os.File, ctty int, master *os.File, err error) {
	w := wk.w
	ctty = -1
	wk.one = r.oneStream(w.LocalRank)
	for i, std := range []console.Std{console.StdOut, console.StdErr, console.StdNone} {
		if i == 1 && wk.one { // the worker's stderr is its stdout's pipe or terminal
			wk.readers, writeEnds = append(wk.readers, wk.readers[0]), append(writeEnds, writeEnds[0])
			continue
		}
		rd, wr, isPty, err := r.streamEnds(l, i < 2 && l.tty[i] && r.shown(w.LocalRank, std))
		if err != nil {
			return writeEnds, -1, nil, fmt.Errorf("%w: rank %d: pipe: %w%s", failure.ErrInternal, w.Rank, err, proc.FDLimitHint(err))
		}
		wk.readers, writeEnds = append(wk.readers, rd), append(writeEnds, wr)
		if isPty {
			wk.masters = append(wk.masters, rd)
			ctty, master = i+1, rd // stderr's rather than stdout's: a shell takes its terminal from fd 2 (bash's job control)
		}
	}
	return writeEnds, ctty, master, nil
}

// oneStream reports whether the worker of local rank lr gets one pipe (or pseudo-terminal) for its stdout and its
// stderr, as a worker of torchrun writes both to the one file that torchrun's stdout and stderr are: when tpurun's
// are one file (2>&1, a terminal, a notebook's pipe), both streams are shown there and no log file needs them
// apart. What the worker writes then reaches the file in the order it wrote it (two pipes cannot keep it: which
// one tpurun reads first is the scheduler's choice); the root cause's tail holds both streams.
func (r *Runner) oneStream(lr int) bool {
	return r.Stdout != nil && r.Stdout == r.Stderr && r.LogDir == "" &&
		r.shown(lr, console.StdOut) && r.shown(lr, console.StdErr)
}

// forwarders makes the forwarders of the worker's stdout and stderr (and opens their log files): one when they
// are one stream (oneStream).
func (r *Runner) forwarders(logRel string, wk *child) error {
	for i, s := range []struct {
		std     console.Std
		console *console.Console
		name    string
	}{{console.StdOut, r.Stdout, "stdout.log"}, {console.StdErr, r.Stderr, "stderr.log"}} {
		if i == 1 && wk.one {
			wk.fwd[0].Tail = &wk.errTail
			break
		}
		f, err := r.forwarder(logRel, wk, s.std, s.console, s.name)
		if err != nil {
			return err
		}
		if i == 1 {
			f.Tail = &wk.errTail
		}
		wk.fwd = append(wk.fwd, forward{f, wk.readers[i]})
	}
	return nil
}

// streamEnds are the launcher's and the worker's ends of one stream: a pseudo-terminal's master and slave when tty
// (isPty), else a pipe's (also when no pseudo-terminal can be made).
func (r *Runner) streamEnds(l *launch, tty bool) (rd, wr *os.File, isPty bool, err error) {
	if tty {
		if m, s, ok := r.openPty(l); ok {
			return m, s, true, nil
		}
	}
	pr, pw, err := console.Pipe()
	return pr, pw, false, err
}

// openPty makes a pseudo-terminal of tpurun's window size; when it cannot, a warning says so once per attempt.
func (r *Runner) openPty(l *launch) (master, slave *os.File, ok bool) {
	m, s, err := console.OpenPty(l.ws)
	if err != nil {
		l.noPty.Do(func() {
			r.Log.Warn("no pseudo-terminal for the workers: they get pipes (and /dev/null as stdin), as when tpurun is not at a terminal",
				zap.Error(err))
		})
		return nil, nil, false
	}
	return m, s, true
}

// terminalInput makes local rank 0's stdin its pseudo-terminal, the one that gets what is typed at tpurun's terminal
// (Terminal): its stderr's or else its stdout's when that is one, else a pseudo-terminal of its own, whose output (what the worker writes
// to /dev/tty: a password prompt) goes to tpurun's terminal as it is. It returns the worker's new ends. Without a
// pseudo-terminal the worker reads /dev/null.
func (r *Runner) terminalInput(l *launch, wk *child, cmd *exec.Cmd) []*os.File {
	for i, std := range []io.Writer{cmd.Stderr, cmd.Stdout} { // the controlling terminal's (see streams)
		if rd := wk.readers[1-i]; slices.Contains(wk.masters, rd) {
			cmd.Stdin, wk.input = std.(*os.File), rd
			return nil
		}
	}
	m, s, ok := r.openPty(l)
	if !ok {
		return nil
	}
	wk.readers, wk.masters = append(wk.readers, m), append(wk.masters, m)
	cmd.Stdin, wk.input = s, m
	wk.fwd = append(wk.fwd, forward{&console.Forwarder{Console: r.Term.f, Terminal: true}, m})
	return []*os.File{s}
}

// shown reports whether local rank lr's stream std reaches the console (not redirected, not filtered out).
func (r *Runner) shown(lr int, std console.Std) bool {
	return (r.LocalRanksFilter == nil || slices.Contains(r.LocalRanksFilter, lr)) &&
		(r.Redirects.For(lr)&std == 0 || r.Tee.For(lr)&std != 0)
}

// forwarder is the forwarder of one of the worker's streams: to the console unless redirected or filtered out,
// to its log file below logRel with a log directory.
func (r *Runner) forwarder(logRel string, wk *child, std console.Std, con *console.Console, name string) (*console.Forwarder, error) {
	w := wk.w
	f := &console.Forwarder{Prefix: r.prefix(w)}
	if r.shown(w.LocalRank, std) {
		f.Console = con
		// At a terminal each read goes out whole (a progress bar's frame); into a pipe or a file a prompt or
		// "Downloading... " shows once the worker has paused a moment in its line.
		f.Terminal = con.Terminal()
		if !f.Terminal {
			f.ShowPartial = console.PartialAfter
		}
	}
	if logRel == "" {
		return f, nil
	}
	lf, err := safepath.OpenBeneath(r.LogDir, filepath.Join(logRel, name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, logFileMode)
	if err != nil {
		return nil, fmt.Errorf("rank %d: log file: %w%s", w.Rank, err, proc.FDLimitHint(err)) // unsafe path: 2, else 70
	}
	wk.files = append(wk.files, lf)
	msg := "log file write failed; the rest of this stream goes to the console only, not to the file"
	if f.Console == nil {
		msg = "log file write failed; the rest of this stream is lost: it is not shown on the console (redirected or filtered out)"
	}
	f.File = &logWriter{f: lf, warn: func(path string, err error) {
		r.Log.Warn(msg, zap.Int("rank", w.Rank), zap.String("file", path), zap.Error(err))
	}}
	return f, nil
}

// prefix is worker w's line prefix: none for raw output.
func (r *Runner) prefix(w topology.Worker) []byte {
	if r.RawOutput {
		return nil
	}
	return []byte(console.Prefix(r.LogPrefix, w.Rank, w.LocalRank, w.NodeRank, r.Role))
}

// startError is the error of a worker that could not be started: PROGRAM unusable at exec (126/127), the preloaded
// interpreter's refusal to fork (a *failure.ConfigError, 2), arguments and environment too big for execve (the user's
// to trim: argListError), else internal (saying which limit to raise when the host ran out of descriptors or
// processes).
func (r *Runner) startError(w topology.Worker, err error, cmd *exec.Cmd) error {
	var ce *failure.ConfigError
	if errors.As(err, &ce) { // the preloaded interpreter refused to fork: exit 2
		return err
	}
	for _, e := range []error{syscall.ENOENT, syscall.EACCES, syscall.ENOEXEC} {
		if errors.Is(err, e) {
			return &failure.ProgramError{Program: r.Program[0], Err: err, AtExec: true}
		}
	}
	if errors.Is(err, syscall.E2BIG) {
		return argListError(w.Rank, cmd.Args, cmd.Env)
	}
	return fmt.Errorf("%w: rank %d: %w%s%s", failure.ErrInternal, w.Rank, err, proc.FDLimitHint(err), proc.ForkLimitHint(err))
}

// maxArgStrlen is Linux's limit on one argument or environment string (MAX_ARG_STRLEN, 32 pages).
const maxArgStrlen = 32 * 4096

// argListError explains an execve that failed with E2BIG ("argument list too long") for rank: how big the
// arguments and the environment are against the kernel's limits, and the largest variables to trim. Too big a
// command line is the user's to fix, not a launcher bug: it is a *failure.ConfigError (exit 2).
func argListError(rank int, argv, env []string) error {
	size := func(ss []string) (n int) {
		for _, s := range ss {
			n += len(s) + 1 + 8 // the string, its NUL and its pointer
		}
		return n
	}
	limit := 0
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_STACK, &rl) == nil && rl.Cur != unix.RLIM_INFINITY {
		limit = int(rl.Cur / 4) // Linux allows a quarter of the stack for them
	}
	for _, s := range append(append([]string(nil), argv...), env...) {
		if len(s) >= maxArgStrlen {
			name, _, _ := strings.Cut(s, "=")
			return &failure.ConfigError{Field: setting.Environment, Value: name, Hint: fmt.Sprintf("rank %d could not start: one argument or variable is %d bytes, "+
				"over Linux's %d-byte limit for a single string; shorten it (or pass the data in a file)", rank, len(s), maxArgStrlen)}
		}
	}
	vars := append([]string(nil), env...)
	sort.Slice(vars, func(a, b int) bool { return len(vars[a]) > len(vars[b]) })
	var big []string
	for _, kv := range vars[:min(3, len(vars))] {
		name, _, _ := strings.Cut(kv, "=")
		big = append(big, fmt.Sprintf("%s (%d bytes)", name, len(kv)))
	}
	lim := "the kernel's limit"
	if limit > 0 {
		lim = fmt.Sprintf("the kernel's limit of about %d bytes (a quarter of the stack limit, ulimit -s)", limit)
	}
	return &failure.ConfigError{Field: setting.Environment, Value: fmt.Sprintf("%d variables", len(env)), Hint: fmt.Sprintf("rank %d could not start: its "+
		"arguments (%d bytes) and environment (%d bytes) exceed %s; unset or shorten the largest variables: %s, or raise ulimit -s",
		rank, size(argv), size(env), lim, strings.Join(big, ", "))}
}

// logFileMode is the mode of every per-rank log file: readable by the run's user and group tools (0644, before
// the umask), writable by the launcher only.
const logFileMode = 0o644

// logWriter is a per-rank log file that tells once when a write fails (a full disk, a quota) and then drops the
// rest: a log file that cannot be written never stops or slows the run, and the console keeps every line.
type logWriter struct {
	f      *os.File
	failed bool
	warn   func(path string, err error)
}

func (l *logWriter) Write(p []byte) (int, error) {
	if l.failed {
		return len(p), nil
	}
	if _, err := l.f.Write(p); err != nil {
		l.failed = true
		l.warn(l.f.Name(), err)
	}
	return len(p), nil
}

// The garbage collector during a start burst: off, within a bound on the process's memory (quietGC).

// memoryInUse is what the runtime counts against its memory limit: all it has mapped, less the heap it gave
// back to the system. From runtime/metrics: runtime.ReadMemStats would stop the world at every start.
func memoryInUse() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64() - s[1].Value.Uint64())
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
		used := memoryInUse()
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

// Sample is the live resource use of one worker, as last sampled.
type Sample struct {
	PID     int
	Rank    int    // the worker's global rank
	RSS     uint64 // bytes
	PeakRSS uint64 // the largest RSS seen by the sampler
	CPU     time.Duration
	At      time.Time
}

// Sampler polls the live workers' RSS and CPU time with gopsutil every interval. It only starts sampling one
// interval after start, so it never competes with starting the workers.
type Sampler struct {
	interval time.Duration
	notify   func([]Sample)
	mu       sync.Mutex
	live     map[int]*Sample // by pid
	gone     map[int]bool    // pids in live whose worker has exited: kept for remove, no longer sampled
}

func NewSampler(interval time.Duration, notify func([]Sample)) *Sampler {
	return &Sampler{interval: interval, notify: notify, live: map[int]*Sample{}}
}

func (s *Sampler) add(pid, rank int) {
	s.mu.Lock()
	s.live[pid] = &Sample{PID: pid, Rank: rank}
	s.mu.Unlock()
}

// remove stops sampling pid and returns its last sample.
func (s *Sampler) remove(pid int) Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	smp := s.live[pid]
	delete(s.live, pid)
	delete(s.gone, pid)
	if smp == nil {
		return Sample{PID: pid}
	}
	return *smp
}

// exited stops sampling pid, whose worker has exited, but keeps its last sample for remove.
func (s *Sampler) exited(pid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone == nil {
		s.gone = map[int]bool{}
	}
	s.gone[pid] = true
}

// Snapshot returns the current samples of the live workers (not of those that have exited).
func (s *Sampler) Snapshot() []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Sample, 0, len(s.live))
	for pid, smp := range s.live {
		if !s.gone[pid] {
			out = append(out, *smp)
		}
	}
	return out
}

func (s *Sampler) Run(ctx context.Context) {
	if s.interval <= 0 {
		return
	}
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.once(ctx)
			if s.notify != nil {
				s.notify(s.Snapshot())
			}
		}
	}
}

func (s *Sampler) once(ctx context.Context) {
	s.mu.Lock()
	pids := make([]int, 0, len(s.live))
	for pid := range s.live {
		if !s.gone[pid] {
			pids = append(pids, pid)
		}
	}
	s.mu.Unlock()
	for _, pid := range pids {
		// Not process.NewProcess: it checks the pid with os.FindProcess, whose pidfd stays open until a finalizer
		// runs. The reads below go to /proc/PID alone; a worker that has gone fails them.
		p := &process.Process{Pid: int32(pid)}
		mem, err1 := p.MemoryInfoWithContext(ctx)
		times, err2 := p.TimesWithContext(ctx)
		if err1 != nil && err2 != nil {
			continue
		}
		s.mu.Lock()
		if smp := s.live[pid]; smp != nil {
			smp.At = time.Now()
			if err1 == nil {
				smp.RSS = mem.RSS
				smp.PeakRSS = max(smp.PeakRSS, mem.RSS)
			}
			if err2 == nil {
				smp.CPU = time.Duration((times.User + times.System) * float64(time.Second))
			}
		}
		s.mu.Unlock()
	}
}
