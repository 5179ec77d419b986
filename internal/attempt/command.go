package attempt

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/proc"
	"tpurun/internal/safepath"
	"tpurun/internal/topology"
	"tpurun/internal/workerenv"
	"tpurun/worker"
)

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

// streams makes the worker's stdout, stderr and results (fd 3) ends, its log files and forwarders: a stream shown
// at a terminal gets a pseudo-terminal (the worker then leads a session whose controlling terminal it is), else a
// pipe. It returns the worker's ends, which the caller closes once the worker started.
func (r *Runner) streams(l *launch, wk *child, cmd *exec.Cmd) ([]*os.File, error) {
	w := wk.w
	logRel := "" // the worker's log directory below the log directory; made by makeLogDirs
	if l.sv.a.LogDir != "" {
		logRel = r.rankLogDir(l.sv.as.N, w)
	}
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
			return writeEnds, -1, nil, fmt.Errorf("%w: rank %d: pipe: %w%s", failure.ErrInternal, w.Rank, err, proc.LimitHint(err))
		}
		wk.readers, writeEnds = append(wk.readers, rd), append(writeEnds, wr)
		if isPty {
			wk.masters = append(wk.masters, rd)
			ctty, master = i+1, rd // stderr's rather than stdout's: a shell takes its terminal from fd 2 (bash's job control)
		}
	}
	return writeEnds, ctty, master, nil
}

// oneStream reports whether the worker of local rank lr gets one pipe (or pseudo-terminal) for stdout and stderr,
// as torchrun's workers do: when tpurun's are one file (2>&1, a terminal), both are shown there and no log file
// needs them apart. Its output then keeps the order it was written in (two pipes cannot); the tail holds both.
func (r *Runner) oneStream(lr int) bool {
	return r.Stdout != nil && r.Stdout == r.Stderr && r.LogDir == "" &&
		r.shown(lr, console.StdOut) && r.shown(lr, console.StdErr)
}

// forwarders makes the forwarders of the worker's stdout and stderr (and opens their log files): one when they
// are one stream (oneStream).
func (r *Runner) forwarders(logRel string, wk *child) error {
	out, err := r.forwarder(logRel, wk, console.StdOut, r.Stdout, "stdout.log")
	if err != nil {
		return err
	}
	wk.fwd = append(wk.fwd, forward{out, wk.readers[0]})
	if wk.one {
		out.Tail = &wk.errTail
		return nil
	}
	errs, err := r.forwarder(logRel, wk, console.StdErr, r.Stderr, "stderr.log")
	if err != nil {
		return err
	}
	errs.Tail = &wk.errTail
	wk.fwd = append(wk.fwd, forward{errs, wk.readers[1]})
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

// terminalInput makes local rank 0's stdin the pseudo-terminal that gets what is typed at tpurun's terminal: its
// stderr's or stdout's when that is one, else one of its own, whose output (a password prompt on /dev/tty) goes to
// tpurun's terminal. It returns the worker's new ends. Without a pseudo-terminal the worker reads /dev/null.
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
	f := &console.Forwarder{}
	if !r.RawOutput { // raw output: worker lines as they are
		f.Prefix = []byte(console.Prefix(r.LogPrefix, w.Rank, w.LocalRank, w.NodeRank, r.Role))
	}
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
		return nil, fmt.Errorf("rank %d: log file: %w%s", w.Rank, err, proc.LimitHint(err)) // unsafe path: 2, else 70
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

// startError is the error of a worker that could not be started: PROGRAM unusable at exec (126/127), the preloaded
// interpreter's refusal (2), arguments and environment too big for execve (argListError), else internal (with the
// limit to raise when the host ran out of descriptors or processes).
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
	return fmt.Errorf("%w: rank %d: %w%s", failure.ErrInternal, w.Rank, err, proc.LimitHint(err))
}

// maxArgStrlen is Linux's limit on one argument or environment string (MAX_ARG_STRLEN, 32 pages).
const maxArgStrlen = 32 * 4096

// argListError explains an execve that failed with E2BIG for rank: the sizes against the kernel's limits, and the
// largest variables to trim. It is the user's to fix: a *failure.ConfigError (exit 2).
func argListError(rank int, argv, env []string) error {
	size := func(ss []string) (n int) {
		for _, s := range ss {
			n += len(s) + 1 + 8 // the string, its NUL and its pointer
		}
		return n
	}
	for _, s := range slices.Concat(argv, env) {
		if len(s) >= maxArgStrlen {
			name, _, _ := strings.Cut(s, "=")
			return &failure.ConfigError{Field: failure.Environment, Value: name, Hint: fmt.Sprintf("rank %d could not start: one argument or variable is %d bytes, "+
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
	var rl unix.Rlimit // Linux allows a quarter of the stack for the arguments and environment
	if unix.Getrlimit(unix.RLIMIT_STACK, &rl) == nil && rl.Cur != unix.RLIM_INFINITY {
		lim = fmt.Sprintf("the kernel's limit of about %d bytes (a quarter of the stack limit, ulimit -s)", rl.Cur/4)
	}
	return &failure.ConfigError{Field: failure.Environment, Value: fmt.Sprintf("%d variables", len(env)), Hint: fmt.Sprintf("rank %d could not start: its "+
		"arguments (%d bytes) and environment (%d bytes) exceed %s; unset or shorten the largest variables: %s, or raise ulimit -s",
		rank, size(argv), size(env), lim, strings.Join(big, ", "))}
}

// logFileMode is the mode of every per-rank log file: readable by the run's user and group tools (0644, before
// the umask), writable by the launcher only.
const logFileMode = 0o644

// logWriter is a per-rank log file that tells once when a write fails (a full disk) and then drops the rest: it
// never stops or slows the run, and the console keeps every line.
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
