package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"go.uber.org/zap"

	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/proc"
	"tpurun/internal/topology"
	"tpurun/internal/workerenv"
	"tpurun/internal/zygote"
	"tpurun/worker"
)

// starter starts one worker process of an attempt, held (see proc.StartHeld): exec'd, or forked from the
// preloaded interpreter (--preload). cmd has its Path, Args, Env, Dir, stdio and ExtraFiles set.
type starter interface {
	start(rp *proc.Reaper, cmd *exec.Cmd, onExit func(*proc.Process)) (*proc.Process, error)
}

// execStarter execs every worker.
type execStarter struct{}

func (execStarter) start(rp *proc.Reaper, cmd *exec.Cmd, onExit func(*proc.Process)) (*proc.Process, error) {
	return proc.StartHeld(rp, cmd, onExit)
}

// moduleName is a dotted Python module name, or __main__ (function mode's caller).
var moduleName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// checkPreload validates Spec.Preload: module names, and a reaper to adopt the forked workers.
func (s *Spec) checkPreload() error {
	if len(s.Preload) == 0 {
		return nil
	}
	list := strings.Join(s.Preload, ",")
	for _, m := range s.Preload {
		if !moduleName.MatchString(m) {
			return &failure.ConfigError{Field: failure.SettingPreload, Value: list, Hint: fmt.Sprintf("%q is not a Python module name; "+
				"give dotted module names, comma-separated, e.g. torch,torch.distributed", m)}
		}
	}
	if s.NoReaper && os.Getpid() != 1 {
		return errPreloadReaper(list)
	}
	return nil
}

// errPreloadReaper is the refusal of a preload without the reaper.
func errPreloadReaper(list string) error {
	return &failure.ConfigError{Field: failure.SettingPreload, Value: list, Hint: "the workers forked by the preloaded interpreter are " +
		"re-parented to tpurun, which must be the child subreaper to supervise them: drop --no-subreaper, or --preload"}
}

// preloader forks the workers from the job's preloaded interpreter, started once (and again only if it died).
type preloader struct {
	j       *job
	cfg     zygote.Config
	cmd     zygote.Command
	z       *zygote.Zygote
	devnull *os.File
	marker  string
	out     sync.WaitGroup // the forwarders of the interpreter's own output
}

// startPreload starts the preloaded interpreter of the job (Spec.Preload; without, it does nothing) before any worker:
// it imports the modules and proves it safe to fork, or the job ends with a *failure.ConfigError naming what made it
// unsafe (exit 2). ctx is the job's: a stop signal or the timeout meanwhile kills the interpreter and ends the job.
// From then on the workers are forked from it.
func (j *job) startPreload(ctx context.Context) error {
	s := &j.spec
	if len(s.Preload) == 0 {
		return nil
	}
	list := strings.Join(s.Preload, ",")
	if j.reaper == nil { // the subreaper could not be had
		return errPreloadReaper(list)
	}
	cmd, err := zygote.ParseCommand(s.Program, lookupEnv(s.Env, "PYTHON_EXEC"))
	if err != nil {
		return &failure.ConfigError{Field: failure.SettingPreload, Value: list, Hint: err.Error()}
	}
	if slices.Contains(s.Preload, "__main__") && s.Fn == nil {
		return &failure.ConfigError{Field: failure.SettingPreload, Value: list, Hint: "__main__ names the main module of the program that " +
			"called tpurun.spawn, in function mode (--fn) only; list the modules the program imports instead"}
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", failure.ErrInternal, os.DevNull, err)
	}
	pl := &preloader{j: j, cmd: cmd, devnull: devnull, marker: worker.EnvPreloaded + "=" + list}
	j.preload = pl
	pl.cfg = zygote.Config{Python: cmd.Python, Script: filepath.Join(j.pyModule, "tpurun", "_zygote.py"),
		Preload: s.Preload, Path0: path0(cmd, s.Dir), Env: j.sharedEnv(), Dir: s.Dir, Reaper: j.reaper,
		Log: j.log.Named("preload"), Lockfile: topology.DefaultLockfile, DeviceNodes: topology.DeviceNodeGlobs()}
	if j.host != nil {
		pl.cfg.DevRoot = j.host.DevRoot
	}
	if err := pl.ensure(ctx); err != nil {
		return err
	}
	j.starter = pl
	return nil
}

// ensure starts the interpreter unless it is running.
func (pl *preloader) ensure(ctx context.Context) error {
	if pl.z != nil && pl.z.Alive() {
		return nil
	}
	if pl.z != nil {
		pl.j.log.Warn("the preloaded interpreter is gone: starting it again", zap.Int("pid", pl.z.PID()))
		pl.z.Close()
	}
	for _, std := range []struct {
		console *console.Console
		into    **os.File
	}{{pl.j.stdout, &pl.cfg.Stdout}, {pl.j.stderr, &pl.cfg.Stderr}} {
		r, w, err := os.Pipe()
		if err != nil {
			if std.into == &pl.cfg.Stderr { // the stdout pipe's forwarder ends with its write end
				pl.cfg.Stdout.Close()
			}
			return fmt.Errorf("%w: pipe: %w%s", failure.ErrInternal, err, fdLimitHint(err))
		}
		*std.into = w
		f := &console.Forwarder{Prefix: []byte("[preload] "), Console: std.console}
		pl.out.Go(func() {
			_ = f.Run(r)
			r.Close()
		})
	}
	z, err := zygote.Start(ctx, pl.cfg)
	pl.cfg.Stdout.Close()
	pl.cfg.Stderr.Close()
	var refused *zygote.RefusedError
	switch {
	case errors.As(err, &refused):
		return &failure.ConfigError{Field: failure.SettingPreload, Value: strings.Join(pl.cfg.Preload, ","), Hint: refused.Error()}
	case err != nil && ctx.Err() != nil: // a job-wide stop (a signal, the timeout): Run reports it
		return fmt.Errorf("the preload of %s: %w", strings.Join(pl.cfg.Preload, ","), ctx.Err())
	case err != nil:
		return fmt.Errorf("%w: %w", failure.ErrInternal, err)
	}
	pl.z = z
	pl.j.log.Info("preloaded interpreter ready", zap.Int("pid", z.PID()), zap.String("python", z.Python),
		zap.Strings("modules", pl.cfg.Preload), zap.Float64("import_seconds", z.Seconds))
	return nil
}

// start forks one worker from the interpreter in place of exec'ing cmd (see starter).
func (pl *preloader) start(rp *proc.Reaper, cmd *exec.Cmd, onExit func(*proc.Process)) (*proc.Process, error) {
	c, err := zygote.ParseCommand(cmd.Args, pl.cmd.Python[0])
	if err == nil && !slices.Equal(c.Python, pl.cmd.Python) {
		err = fmt.Errorf("the interpreter options %q of this worker differ from the preloaded interpreter's %q", c.Python, pl.cmd.Python)
	}
	if err != nil {
		return nil, &failure.ConfigError{Field: failure.SettingPreload, Value: strings.Join(pl.cfg.Preload, ","), Hint: err.Error()}
	}
	if err := pl.ensure(context.Background()); err != nil {
		return nil, err
	}
	stdin, ok := cmd.Stdin.(*os.File)
	if !ok {
		stdin = pl.devnull // what os/exec gives a nil Stdin
	}
	files := append([]*os.File{stdin, cmd.Stdout.(*os.File), cmd.Stderr.(*os.File)}, cmd.ExtraFiles...)
	req := zygote.Request{Command: c, Argv: cmd.Args, Env: append(slices.Clone(cmd.Env), pl.marker), Dir: cmd.Dir, Files: files}
	p, err := pl.z.Fork(rp, req, onExit)
	if errors.Is(err, zygote.ErrGone) {
		// It died after ensure looked (killed between attempts, its exit not delivered yet): no worker of this
		// request runs (a forked one exits without its go byte). Started again, once.
		if err := pl.ensure(context.Background()); err != nil {
			return nil, err
		}
		p, err = pl.z.Fork(rp, req, onExit)
	}
	var refused *zygote.RefusedError
	if errors.As(err, &refused) {
		return nil, &failure.ConfigError{Field: failure.SettingPreload, Value: strings.Join(pl.cfg.Preload, ","), Hint: refused.Error()}
	}
	return p, err
}

// close ends the interpreter and waits for its output to be forwarded.
func (pl *preloader) close() {
	if pl.z != nil {
		pl.z.Close()
	}
	pl.out.Wait()
	pl.devnull.Close()
}

// path0 is what the interpreter puts first on sys.path for c: the directory of its program file (links
// resolved), or the working directory for -m.
func path0(c zygote.Command, dir string) string {
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

// sharedEnv is the environment of the preloaded interpreter: what every local worker's environment holds with
// the same value (from the first attempt's plan), without any per-rank variable. What a module reads from the
// environment while it is imported is read there, once.
func (j *job) sharedEnv() []string {
	s := &j.spec
	rt := workerenv.Runtime{RunID: s.RunID, Role: s.Role, MaxRestarts: s.MaxRestarts, MasterAddr: s.MasterAddr,
		MasterPort: s.MasterPort, SweepTag: s.SweepTag}
	var local []topology.Worker
	if j.plan != nil && s.Rendezvous.Solo() {
		local = j.plan.Local(j.nodeRank)
	}
	if len(local) == 0 { // a multi-host world is planned at its join: the inherited environment then
		out := []string{worker.EnvRunID + "=" + s.RunID, worker.EnvSweepTag + "=" + s.SweepTag}
		if j.localWorkers > 1 && lookupEnv(s.Env, "OMP_NUM_THREADS") == "" {
			out = append(out, "OMP_NUM_THREADS=1") // as every worker gets it
		}
		for _, kv := range s.Env {
			if k, _, _ := strings.Cut(kv, "="); !workerenv.PerRank(k) && k != worker.EnvRunID && k != worker.EnvSweepTag {
				out = append(out, kv)
			}
		}
		return out
	}
	count := map[string]int{}
	for _, w := range local {
		for _, kv := range workerenv.For(s.Env, j.plan, w, rt) {
			count[kv]++
		}
	}
	var out []string
	for kv, n := range count {
		if k, _, _ := strings.Cut(kv, "="); n == len(local) && !workerenv.PerRank(k) {
			out = append(out, kv)
		}
	}
	slices.Sort(out)
	return out
}
