package host

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
	"tpurun/internal/setting"
	"tpurun/internal/spec"
	"tpurun/internal/topology"
	"tpurun/internal/workerenv"
	"tpurun/internal/zygote"
	"tpurun/worker"
)

// Preloader forks the workers from the job's preloaded interpreter, started once (and again only if it died): the
// attempt's starter (attempt.Starter) with --preload.
type Preloader struct {
	p       *Prepared
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
func (p *Prepared) startPreload(ctx context.Context) error {
	s := p.spec
	if len(s.Preload) == 0 {
		return nil
	}
	list := strings.Join(s.Preload, ",")
	if p.reaper == nil { // the subreaper could not be had
		return spec.PreloadReaperError(list)
	}
	cmd, err := zygote.ParseCommand(s.Program, spec.LookupEnv(s.Env, spec.EnvPythonExec))
	if err != nil {
		return &failure.ConfigError{Field: setting.Preload, Value: list, Hint: err.Error()}
	}
	if slices.Contains(s.Preload, "__main__") && s.Fn == nil {
		return &failure.ConfigError{Field: setting.Preload, Value: list, Hint: "__main__ names the main module of the program that " +
			"called tpurun.spawn, in function mode (--fn) only; list the modules the program imports instead"}
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", failure.ErrInternal, os.DevNull, err)
	}
	pl := &Preloader{p: p, cmd: cmd, devnull: devnull, marker: worker.EnvPreloaded + "=" + list}
	p.preload = pl
	pl.cfg = zygote.Config{Python: cmd.Python, Script: filepath.Join(p.PyModule, "tpurun", "_zygote.py"),
		Preload: s.Preload, Path0: path0(cmd, s.Dir), Env: p.sharedEnv(), Dir: s.Dir, Reaper: p.reaper,
		Log: p.Log.Named("preload"), Lockfile: topology.DefaultLockfile, DeviceNodes: topology.DeviceNodeGlobs()}
	if p.Host != nil {
		pl.cfg.DevRoot = p.Host.DevRoot
	}
	return pl.ensure(ctx)
}

// ensure starts the interpreter unless it is running.
func (pl *Preloader) ensure(ctx context.Context) error {
	if pl.z != nil && pl.z.Alive() {
		return nil
	}
	if pl.z != nil {
		pl.p.Log.Warn("the preloaded interpreter is gone: starting it again", zap.Int("pid", pl.z.PID()))
		pl.z.Close()
	}
	for _, std := range []struct {
		console *console.Console
		into    **os.File
	}{{pl.p.stdout, &pl.cfg.Stdout}, {pl.p.stderr, &pl.cfg.Stderr}} {
		r, w, err := os.Pipe()
		if err != nil {
			if std.into == &pl.cfg.Stderr { // the stdout pipe's forwarder ends with its write end
				pl.cfg.Stdout.Close()
			}
			return fmt.Errorf("%w: pipe: %w%s", failure.ErrInternal, err, proc.FDLimitHint(err))
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
		return &failure.ConfigError{Field: setting.Preload, Value: strings.Join(pl.cfg.Preload, ","), Hint: refused.Error()}
	case err != nil && ctx.Err() != nil: // a job-wide stop (a signal, the timeout): Run reports it
		return fmt.Errorf("the preload of %s: %w", strings.Join(pl.cfg.Preload, ","), ctx.Err())
	case err != nil:
		return fmt.Errorf("%w: %w", failure.ErrInternal, err)
	}
	pl.z = z
	pl.p.Log.Info("preloaded interpreter ready", zap.Int("pid", z.PID()), zap.String("python", z.Python),
		zap.Strings("modules", pl.cfg.Preload), zap.Float64("import_seconds", z.Seconds))
	return nil
}

// Start forks one worker from the interpreter in place of exec'ing cmd (see attempt.Starter).
func (pl *Preloader) Start(rp *proc.Reaper, cmd *exec.Cmd, onExit func(*proc.Process)) (*proc.Process, error) {
	c, err := zygote.ParseCommand(cmd.Args, pl.cmd.Python[0])
	if err == nil && !slices.Equal(c.Python, pl.cmd.Python) {
		err = fmt.Errorf("the interpreter options %q of this worker differ from the preloaded interpreter's %q", c.Python, pl.cmd.Python)
	}
	if err != nil {
		return nil, &failure.ConfigError{Field: setting.Preload, Value: strings.Join(pl.cfg.Preload, ","), Hint: err.Error()}
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
		return nil, &failure.ConfigError{Field: setting.Preload, Value: strings.Join(pl.cfg.Preload, ","), Hint: refused.Error()}
	}
	return p, err
}

// close ends the interpreter and waits for its output to be forwarded.
func (pl *Preloader) close() {
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
func (p *Prepared) sharedEnv() []string {
	s := p.spec
	rt := workerenv.Runtime{RunID: s.RunID, Role: s.Role, MaxRestarts: s.MaxRestarts, MasterAddr: s.MasterAddr,
		MasterPort: s.MasterPort, SweepTag: s.SweepTag}
	var local []topology.Worker
	if p.Plan != nil && s.Rendezvous.Solo() {
		local = p.Plan.Local(p.NodeRank)
	}
	if len(local) == 0 { // a multi-host world is planned at its join: the inherited environment then
		out := []string{worker.EnvRunID + "=" + s.RunID, worker.EnvSweepTag + "=" + s.SweepTag}
		if p.LocalWorkers > 1 && spec.LookupEnv(s.Env, "OMP_NUM_THREADS") == "" {
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
		for _, kv := range workerenv.For(s.Env, p.Plan, w, rt) {
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
