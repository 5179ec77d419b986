package preload

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"go.uber.org/zap"

	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/proc"
	"tpurun/internal/topology"
	"tpurun/worker"
)

// Job is what a job's preloaded interpreter is made from.
type Job struct {
	Modules    []string // the preload list (--preload), imported in this order
	Program    []string // the workers' command line; its interpreter and options are the interpreter's
	PythonExec string   // the interpreter a bare program name resolves to ($PYTHON_EXEC), "" for python3
	FnMode     bool     // function mode (--fn): "__main__" may be preloaded, the caller's main module
	Dir        string   // the workers' working directory ("" this process's)
	Env        []string // what every local worker's environment shares (workerenv.Shared)
	DevRoot    string   // the detected host's /dev ("" /dev)
	Reaper     *proc.Reaper
	// Stdout and Stderr take the interpreter's own output (what the imports print), each line prefixed [preload].
	Stdout, Stderr *console.Console
	Log            *zap.Logger
}

// Preloader forks the workers from the job's preloaded interpreter, started once (and again only if it died): the
// attempt's starter (attempt.Starter) with --preload.
type Preloader struct {
	job     Job
	cfg     Config
	cmd     Command
	ip      *Interpreter
	devnull *os.File
	out     sync.WaitGroup // the forwarders of the interpreter's own output
}

// NewPreloader starts the preloaded interpreter of j before any worker: it imports the modules and proves it safe
// to fork, or the error is a *failure.ConfigError naming what made it unsafe (exit 2). ctx is the job's: a stop
// signal or the timeout meanwhile kills the interpreter and ends the job. The caller closes the Preloader.
func NewPreloader(ctx context.Context, j Job) (*Preloader, error) {
	cmd, err := ParseCommand(j.Program, j.PythonExec)
	if err != nil {
		return nil, configError(j.Modules, err)
	}
	if slices.Contains(j.Modules, "__main__") && !j.FnMode {
		return nil, configError(j.Modules, errors.New("__main__ names the main module of the program that called "+
			"tpurun.spawn, in function mode (--fn) only; list the modules the program imports instead"))
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", failure.ErrInternal, os.DevNull, err)
	}
	pl := &Preloader{job: j, cmd: cmd, devnull: devnull}
	pl.cfg = Config{Python: cmd.Python, Preload: j.Modules, Path0: path0(cmd, j.Dir), Env: j.Env, Dir: j.Dir, Reaper: j.Reaper,
		Log: j.Log.Named("preload"), DevRoot: j.DevRoot, Lockfile: topology.DefaultLockfile, DeviceNodes: topology.DeviceNodeGlobs()}
	if err := pl.ensure(ctx); err != nil {
		pl.Close()
		return nil, err
	}
	return pl, nil
}

// ensure starts the interpreter unless it is running.
func (pl *Preloader) ensure(ctx context.Context) error {
	if pl.ip != nil && pl.ip.Alive() {
		return nil
	}
	if pl.ip != nil {
		pl.job.Log.Warn("the preloaded interpreter is gone: starting it again", zap.Int("pid", pl.ip.PID()))
		pl.ip.Close()
	}
	for _, std := range []struct {
		console *console.Console
		into    **os.File
	}{{pl.job.Stdout, &pl.cfg.Stdout}, {pl.job.Stderr, &pl.cfg.Stderr}} {
		r, w, err := os.Pipe()
		if err != nil {
			if std.into == &pl.cfg.Stderr { // the stdout pipe's forwarder ends with its write end
				pl.cfg.Stdout.Close()
			}
			return fmt.Errorf("%w: pipe: %w%s", failure.ErrInternal, err, proc.LimitHint(err))
		}
		*std.into = w
		f := &console.Forwarder{Prefix: []byte("[preload] "), Console: std.console}
		pl.out.Go(func() {
			_ = f.Run(r)
			r.Close()
		})
	}
	ip, err := Start(ctx, pl.cfg)
	pl.cfg.Stdout.Close()
	pl.cfg.Stderr.Close()
	var refused *RefusedError
	switch {
	case errors.As(err, &refused):
		return configError(pl.cfg.Preload, refused)
	case err != nil && ctx.Err() != nil: // a job-wide stop (a signal, the timeout): Run reports it
		return fmt.Errorf("the preload of %s: %w", strings.Join(pl.cfg.Preload, ","), ctx.Err())
	case err != nil:
		return fmt.Errorf("%w: %w", failure.ErrInternal, err)
	}
	pl.ip = ip
	pl.job.Log.Info("preloaded interpreter ready", zap.Int("pid", ip.PID()), zap.String("python", ip.Python),
		zap.Strings("modules", pl.cfg.Preload), zap.Float64("import_seconds", ip.Seconds))
	return nil
}

// configError is err as the job reports it: a bad --preload setting (exit 2).
func configError(modules []string, err error) error {
	return &failure.ConfigError{Field: failure.Preload, Value: strings.Join(modules, ","), Hint: err.Error()}
}

// Start forks one worker from the interpreter in place of exec'ing cmd (see attempt.Starter).
func (pl *Preloader) Start(rp *proc.Reaper, cmd *exec.Cmd, onExit func(*proc.Process)) (*proc.Process, error) {
	c, err := ParseCommand(cmd.Args, pl.cmd.Python[0])
	if err == nil && !slices.Equal(c.Python, pl.cmd.Python) {
		err = fmt.Errorf("the interpreter options %q of this worker differ from the preloaded interpreter's %q", c.Python, pl.cmd.Python)
	}
	if err != nil {
		return nil, configError(pl.cfg.Preload, err)
	}
	if err := pl.ensure(context.Background()); err != nil {
		return nil, err
	}
	stdin, ok := cmd.Stdin.(*os.File)
	if !ok {
		stdin = pl.devnull // what os/exec gives a nil Stdin
	}
	files := append([]*os.File{stdin, cmd.Stdout.(*os.File), cmd.Stderr.(*os.File)}, cmd.ExtraFiles...)
	env := append(slices.Clone(cmd.Env), worker.EnvPreloaded+"="+strings.Join(pl.job.Modules, ","))
	req := Request{Command: c, Argv: cmd.Args, Env: env, Dir: cmd.Dir, Files: files}
	p, err := pl.ip.Fork(rp, req, onExit)
	if errors.Is(err, ErrGone) {
		// It died after ensure looked (killed between attempts, its exit not delivered yet): no worker of this
		// request runs (a forked one exits without its go byte). Started again, once.
		if err := pl.ensure(context.Background()); err != nil {
			return nil, err
		}
		p, err = pl.ip.Fork(rp, req, onExit)
	}
	var refused *RefusedError
	if errors.As(err, &refused) {
		return nil, configError(pl.cfg.Preload, refused)
	}
	return p, err
}

// Close ends the interpreter and waits for its output to be forwarded.
func (pl *Preloader) Close() {
	if pl.ip != nil {
		pl.ip.Close()
	}
	pl.out.Wait()
	pl.devnull.Close()
}

// path0 is what the interpreter puts first on sys.path for c: the directory of its program file (links
// resolved), or the working directory for -m.
func path0(c Command, dir string) string {
	if dir == "" {
		dir, _ = os.Getwd()
	}
	if c.Module {
		return dir
	}
	p := c.Target
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		return p
	}
	return filepath.Dir(p)
}
