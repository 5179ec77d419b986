// Package host owns this host's preparation for a run, before the first join (Prepared), in this one file: detect
// once, discover a job the host's environment lays out, plan this host, check the chips and the master port, pick
// the ports, make the run's directory, put the Python module on the workers' path and set up function mode, start
// the preloaded interpreter the workers are forked from, and the checks of a Spec that need the host; then, at the
// end of the file, what the job asks of the host at each join: the rendezvous opened, this node's Member, and the plan
// of the agreed world. It knows no attempt and no job.
package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"go.uber.org/zap"

	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/freeport"
	"tpurun/internal/proc"
	"tpurun/internal/setting"
	"tpurun/internal/spec"
	"tpurun/internal/topology"
	"tpurun/internal/workerenv"
	"tpurun/internal/zygote"
	"tpurun/rendezvous"

	// The rendezvous backends tpurun links, each registering itself with package rendezvous: the one list.
	_ "tpurun/rendezvous/etcd"
	"tpurun/rendezvous/static" // also named below: discovery lays a host-described job out as a static world
	_ "tpurun/rendezvous/tcp"
	"tpurun/worker"
)

// Prepared is this host made ready for a run, before the first join: detected once, planned, its chips checked,
// its ports picked, the run's directory made, the Python module on the workers' path and the preloaded interpreter
// started. The job reads the fields; the rest is the host's own.
type Prepared struct {
	Host         *topology.Host      // detected once; nil with Spec.Plan
	Layout       *topology.JobLayout // the job the host's environment described, when this run joins it (discover)
	Request      topology.Request
	Plan         *topology.Plan // this host as detected: the plan of a world of one
	NodeRank     int            // this host's node in Plan
	LocalWorkers int
	Accelerator  string
	Ports        map[string]int // node 0's choice of ports is everyone's (master, coordinator, megascale)
	PyModule     string         // the directory holding the Python module tpurun/ (on the workers' PYTHONPATH)
	Scratch      string         // holds the error files when there is no log dir
	RunLogs      string         // this run's directory below Spec.LogDir, as torchrun names it: <run-id>_<random>
	Log          *zap.Logger    // the run's logger (its run id as discovery left it)

	spec           *spec.Spec // the job's, completed here (the slice, the token, PYTHONPATH, function mode's program)
	randomRunID    bool       // the run id was made up at random: a world laid out by the host takes "none" instead
	reaper         *proc.Reaper
	stdout, stderr *console.Console
	instance       string
	pyDir          string     // a private copy of the Python module (when the shared one cannot be used), removed at the end
	preload        *Preloader // the preloaded interpreter (Spec.Preload); nil without
}

// New is the preparation of this host for the job s (completed in place by Prepare): randomRunID says that its run
// id was made up at random (spec.Spec.WithDefaults); the reaper is the one lent to the run (nil without), and the
// consoles take the preloaded interpreter's own output.
func New(s *spec.Spec, randomRunID bool, log *zap.Logger, reaper *proc.Reaper, stdout, stderr *console.Console) *Prepared {
	return &Prepared{spec: s, randomRunID: randomRunID, Log: log, reaper: reaper, stdout: stdout, stderr: stderr,
		instance: rendezvous.NewInstance()}
}

// Preloader is the preloaded interpreter the workers are forked from, nil without --preload.
func (p *Prepared) Preloader() *Preloader { return p.preload }

// Close ends the preloaded interpreter (first: it forwards its output to the consoles) and removes what the
// preparation made for the run alone.
func (p *Prepared) Close() {
	if p.preload != nil {
		p.preload.close()
	}
	if p.Scratch != "" {
		_ = os.RemoveAll(p.Scratch)
	}
	if p.pyDir != "" {
		_ = os.RemoveAll(p.pyDir)
	}
}

// Prepare is everything before the first join: detect once, plan this host, check the chips are free and the
// ports can be bound, set up function mode, pick the ports this node offers, and the error files' directory. ctx
// is the job's: a job-wide stop ends it.
func (p *Prepared) Prepare(ctx context.Context) error {
	if err := p.planHost(ctx); err != nil {
		return err
	}
	if p.spec.Fn != nil {
		if err := p.setupFn(); err != nil {
			return err
		}
	}
	for _, step := range []func() error{p.pythonPath, p.pickPorts, p.makeRunDir} {
		if err := step(); err != nil {
			return err
		}
	}
	return p.startPreload(ctx) // last: what the workers' environment needs is known, and nothing else can fail
}

// planHost is this host's plan: a ready one (Spec.Plan), or detection's.
func (p *Prepared) planHost(ctx context.Context) error {
	s := p.spec
	if s.Plan == nil {
		return p.detect(ctx)
	}
	if err := p.resolveRendezvous(); err != nil {
		return err
	}
	p.Plan, p.NodeRank = s.Plan, s.NodeRank
	p.LocalWorkers, p.Accelerator = len(s.Plan.Local(s.NodeRank)), string(s.Plan.Device)
	return nil
}

// pickPorts picks the ports of a world of one (MASTER_PORT, free or checked; the JAX coordinator's), or those this
// node offers the world should it be node 0 (its join picks the free ones they lack).
func (p *Prepared) pickPorts() error {
	s := p.spec
	if !s.Rendezvous.Solo() {
		p.Ports = map[string]int{rendezvous.PortMegascale: topology.DefaultMegascalePort}
		if s.MasterPort != 0 { // node 0's choice, shared with every node
			p.Ports[rendezvous.PortMaster] = s.MasterPort
		}
		return nil
	}
	if s.MasterPort == 0 {
		port, err := freeport.Pick(s.MasterAddr)
		if err != nil {
			return fmt.Errorf("%w: MASTER_PORT: %w; pass a port explicitly", failure.ErrInternal, err)
		}
		s.MasterPort = port
	} else if err := checkMasterPort(s.MasterAddr, s.MasterPort, s.ProcRoot); err != nil {
		return err
	}
	if p.Plan.Device.Kind().JAXCoordinator() { // a port of its own (torch's store binds MASTER_PORT)
		port, err := freeport.Pick(s.MasterAddr)
		if err != nil {
			return fmt.Errorf("%w: JAX coordinator port: %w", failure.ErrInternal, err)
		}
		p.Plan.SetJAXCoordinator(net.JoinHostPort(s.MasterAddr, strconv.Itoa(port)))
	}
	return nil
}

// makeRunDir makes this run's directory: below the log directory, torchrun's layout
// <run-id>_<random>/attempt_<n>/<local rank>/; without one, a scratch directory for the error files.
func (p *Prepared) makeRunDir() error {
	s := p.spec
	if s.LogDir == "" {
		d, err := os.MkdirTemp("", "tpurun-"+s.RunID+"-")
		if err != nil {
			return fmt.Errorf("%w: directory for TORCHELASTIC_ERROR_FILE: %w; set TMPDIR or a log directory", failure.ErrInternal, err)
		}
		p.Scratch = d
		return nil
	}
	if err := os.MkdirAll(s.LogDir, 0o755); err != nil {
		return &failure.ConfigError{Field: setting.LogDir, Value: s.LogDir, Hint: err.Error()}
	}
	// A directory that no earlier run (or anyone else) can have prepared, created here exclusively (mkdir never
	// follows a planted final symlink).
	d, err := os.MkdirTemp(s.LogDir, s.RunID+"_")
	if err != nil {
		return &failure.ConfigError{Field: setting.LogDir, Value: s.LogDir, Hint: err.Error()}
	}
	p.RunLogs = filepath.Base(d)
	p.Log.Info("worker logs", zap.String("dir", d))
	return nil
}

// detect finds this host's devices exactly once, plans it as a world of one, and checks the chips and ports.
func (p *Prepared) detect(ctx context.Context) error {
	opts := p.spec.Detect
	opts.Logger = cmp.Or(opts.Logger, p.Log)
	if opts.LookupEnv == nil {
		opts.LookupEnv = spec.EnvLookup(p.spec.Env)
	}
	h, err := topology.Detect(ctx, opts)
	if err != nil {
		return err
	}
	p.Host, p.Request = h, p.spec.Request
	if err := p.resolveRendezvous(); err != nil {
		return err
	}
	h = p.Host // a host on purpose alone is planned as a one-host slice (discover)
	if p.spec.PerCPU && h.Device.V.Kind().PerCore() {
		p.Request.NProcs = runtime.NumCPU()
	}
	p.Accelerator = string(h.Device.V)
	if t := h.AcceleratorType(); t != "" { // a TPU slice's type (v4-16): the nodes of one slice must agree on it
		p.Accelerator = t
	}
	if err := p.planLocal(h); err != nil {
		return err
	}
	if err := p.checkChips(h); err != nil {
		return err
	}
	p.Log.Debug("plan", zap.String("device", string(h.Device.V)), zap.Stringer("device_source", h.Device.Source),
		zap.Int("local_workers", p.LocalWorkers))
	warnIf(p.Log, h.GPUShareNote(p.LocalWorkers))
	return nil
}

// planLocal plans this host: as a world of one, its ports checked, or how many workers it brings to a world.
func (p *Prepared) planLocal(h *topology.Host) error {
	r := p.spec.Rendezvous
	if !r.Solo() {
		var err error
		p.LocalWorkers, err = topology.LocalWorkers(h, p.Request, r.NNodes, r.NumSlices)
		return err
	}
	plan, err := topology.NewPlan(h, p.Request, topology.World{})
	if err != nil {
		return err
	}
	p.Plan, p.NodeRank = plan, topology.SoloNode(h, p.Request)
	if err := p.Plan.CheckPorts(p.NodeRank, h.ProcRoot, nil); err != nil {
		return err
	}
	p.LocalWorkers = len(p.Plan.Local(p.NodeRank))
	return nil
}

// checkChips refuses chips another process holds, unless forced; a check that could not be made is a warning.
func (p *Prepared) checkChips(h *topology.Host) error {
	switch err := h.CheckFree(); {
	case err == nil:
	case !errors.Is(err, topology.ErrChipBusy):
		p.Log.Warn("could not check whether another process holds a chip", zap.Error(err))
	case p.spec.Force:
		p.Log.Warn("starting although another process holds a chip (forced)", zap.Error(err))
	default:
		return err
	}
	return nil
}

// warnIf logs note as a warning unless it is empty.
func warnIf(log *zap.Logger, note string) {
	if note != "" {
		log.Warn(note)
	}
}

// CheckOutputs refuses, before anything starts, a results file or log directory that cannot be written.
func CheckOutputs(s *spec.Spec) error {
	if f := s.Results.File; f != "" {
		dir := f[:strings.LastIndexByte("/"+f, '/')]
		if dir == "" {
			dir = "."
		}
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return &failure.ConfigError{Field: setting.ResultsFile, Value: f, Hint: fmt.Sprintf("its directory %q does not exist or is not a directory; create it first", dir)}
		}
		if st, err := os.Stat(f); err == nil && !st.Mode().IsRegular() {
			return &failure.ConfigError{Field: setting.ResultsFile, Value: f, Hint: "exists and is not a regular file"}
		}
	}
	if d := s.LogDir; d != "" {
		if st, err := os.Stat(d); err == nil && !st.IsDir() {
			return &failure.ConfigError{Field: setting.LogDir, Value: d, Hint: "exists and is not a directory"}
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			return &failure.ConfigError{Field: setting.LogDir, Value: d, Hint: err.Error()}
		}
	}
	return nil
}

// checkMasterPort refuses a MASTER_PORT that another process already listens on, before any worker starts:
// torchrun binds it for its store and fails at once, and without this check rank 0's TCPStore would fail later
// with a bare EADDRINUSE. The check binds and releases addr:port; an address that is not this host's
// (EADDRNOTAVAIL) is left to the workers. The error is a *failure.ConfigError naming the port, the address and the
// holder's pid when procRoot shows it.
func checkMasterPort(addr string, port int, procRoot string) error {
	l, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
	if err == nil {
		return l.Close()
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return nil
	}
	holder := "a process tpurun could not identify"
	if pid, cmd, herr := topology.PortHolder(procRoot, port); herr == nil {
		holder = fmt.Sprintf("pid %d (%s)", pid, cmd)
	}
	return &failure.ConfigError{Field: setting.MasterPort, Value: strconv.Itoa(port),
		Hint: fmt.Sprintf("already in use on %s by %s; stop it, pick another master port, or pass 0 for a free port", addr, holder)}
}

// CheckMasterAddr refuses, on a world of one node, a MASTER_ADDR that does not name this host: rank 0's store
// listens here, so the other ranks would look for it elsewhere and hang until torch's timeout. A name that does
// not resolve, or resolves only to addresses of other hosts, is a *failure.ConfigError naming this host's addresses.
func CheckMasterAddr(s *spec.Spec) error {
	addr := s.MasterAddr
	if !s.Rendezvous.Solo() || s.Plan != nil {
		return nil
	}
	ips, err := net.LookupHost(addr)
	if err != nil {
		return &failure.ConfigError{Field: setting.MasterAddr, Value: addr,
			Hint: fmt.Sprintf("does not resolve (%v); give an IP address or a name of this host, or leave it unset (127.0.0.1)", err)}
	}
	for _, ip := range ips {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err == nil {
			return l.Close()
		}
		if !errors.Is(err, syscall.EADDRNOTAVAIL) {
			return nil // not a verdict about the address (a full fd table, say): the workers will tell
		}
	}
	var mine []string
	if as, err := net.InterfaceAddrs(); err == nil {
		for _, a := range as {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				mine = append(mine, n.IP.String())
			}
		}
	}
	return &failure.ConfigError{Field: setting.MasterAddr, Value: addr, Hint: fmt.Sprintf("is not an address of this host (%s), and a run on one node "+
		"hosts rank 0's store here: leave it unset (127.0.0.1) or give one of this host's addresses; for several nodes give each "+
		"--nnodes N and --node-rank R with node 0's address", strings.Join(mine, ", "))}
}

// discover makes the world the host's environment describes, once, before anything joins: on one host of a TPU
// slice of several hosts, or of a multislice job (topology.JobLayout), a run that asks for no world of its own (no
// backend, or the static backend without an endpoint or host list) joins the others as one static world over every
// slice: node rank = slice id x hosts per slice + worker id, node 0 the coordinator's host (slice 0's first), whose
// server every node meets on the rendezvous port (29400, or the port option). A run on purpose alone
// (RendezvousSpec.Alone: --nnodes 1, --standalone) plans this host as a one-host slice and says so. The world laid
// out this way needs no token off loopback, as torchrun's static world does not (one warning says so).
func (p *Prepared) discover() error {
	r := &p.spec.Rendezvous
	if p.Host == nil || !laidOutByHost(r) {
		return nil
	}
	l, err := p.Host.JobLayout(p.Request)
	if err != nil || l == nil {
		return err
	}
	if r.Alone {
		p.Log.Info("this host is one of several, but runs alone as asked: a world of one host", zap.Stringer("host", l),
			zap.Int("job_nodes", l.NNodes()))
		p.Host = p.Host.Alone()
		for _, k := range topology.JobEnv() {
			p.spec.Env = spec.WithoutEnv(p.spec.Env, k)
		}
		return nil
	}
	if r.NNodes > 0 && r.NNodes != l.NNodes() {
		return &failure.ConfigError{Field: setting.NNodes, Value: strconv.Itoa(r.NNodes),
			Hint: fmt.Sprintf("this host is %s: the job has %d nodes; give --nnodes %d, or leave it out", l, l.NNodes(), l.NNodes())}
	}
	p.Layout = l
	if r.Solo() || r.NodeRank < 0 { // a world of one has no rank to give (0 and -1 alike): the layout's
		r.NodeRank = l.NodeRank()
	}
	r.Backend, r.NNodes, r.MinNodes, r.AllowUnauthenticated = static.Name, l.NNodes(), 0, true
	r.NumSlices, r.SliceID = l.Slices, l.SliceID
	if r.RunID == "" && p.randomRunID { // every node must have the same: torchrun's, as under --rdzv-backend static
		p.spec.RunID, p.randomRunID = spec.NoRunID, false
		p.Log = p.spec.Logger.With(zap.String("run_id", spec.NoRunID))
	}
	r.RunID = cmp.Or(r.RunID, p.spec.RunID)
	if l.Slices > 1 { // no host list names every node: each names itself, and node 0's endpoint is the coordinator's
		port, err := rendezvousPort(r.Conf)
		if err != nil {
			return err
		}
		r.Endpoint = net.JoinHostPort(l.Coordinator, port)
		r.NodeName, r.NodeAddr = cmp.Or(r.NodeName, l.Self()), cmp.Or(r.NodeAddr, l.Self())
	}
	p.Log.Info("this host is one of several: joining them as one world", zap.Stringer("host", l), zap.Int("node_rank", r.NodeRank),
		zap.Int("nnodes", r.NNodes), zap.String("coordinator", l.Coordinator))
	return nil
}

// laidOutByHost reports whether the world of r is the host's to lay out: no backend (and not alone on purpose:
// that is checked by the caller, who says so), or the static backend with neither an endpoint nor a host list.
func laidOutByHost(r *spec.RendezvousSpec) bool {
	if r.Solo() { // --node-rank 0 of one node is the zero spec's; another rank is refused by validateSolo
		return r.NNodes <= 1 && r.NodeRank <= 0
	}
	conf, _ := rendezvous.ParseConf(r.Conf)
	return r.Backend == static.Name && r.Endpoint == "" && conf["hosts"] == ""
}

// rendezvousPort is the port of an endpoint laid out from a host list: the port option, else the default.
func rendezvousPort(conf string) (string, error) {
	c, err := rendezvous.ParseConf(conf)
	if err != nil {
		return "", err
	}
	return cmp.Or(c["port"], strconv.Itoa(rendezvous.DefaultPort)), nil
}

// pythonPath puts the embedded Python module on every worker's PYTHONPATH, so `import tpurun` works in every
// mode: the shared copy in the user's cache (installed once, a stat afterwards), or a private temporary copy when
// the cache cannot be used. Function mode puts it first (its runner must be this version); otherwise it comes last,
// after whatever the user put there.
func (p *Prepared) pythonPath() error {
	s := p.spec
	dir, err := worker.PythonPath("")
	if err != nil {
		p.Log.Debug("no shared copy of the Python module; using a private one", zap.Error(err))
		d, terr := os.MkdirTemp("", "tpurun-py-")
		if terr != nil {
			return fmt.Errorf("%w: directory for the Python module: %w (shared copy: %w); set TMPDIR", failure.ErrInternal, terr, err)
		}
		p.pyDir = d
		if dir, err = worker.InstallPython(d); err != nil {
			return fmt.Errorf("%w: install the Python module into %s: %w", failure.ErrInternal, d, err)
		}
	}
	p.PyModule = dir
	parts := []string{dir, spec.LookupEnv(s.Env, "PYTHONPATH")}
	if s.Fn == nil {
		parts[0], parts[1] = parts[1], parts[0]
	}
	pp := strings.Trim(strings.Join(parts, string(os.PathListSeparator)), string(os.PathListSeparator))
	s.Env = append(spec.WithoutEnv(s.Env, "PYTHONPATH"), "PYTHONPATH="+pp)
	return nil
}

// setupFn makes the program the function runner: python -u -m tpurun.fn --args-json ARGS TARGET [ARGS...].
func (p *Prepared) setupFn() error {
	f, s := p.spec.Fn, p.spec
	if err := f.Check(); err != nil {
		return err
	}
	// f.Python is the CLI's choice (cli.WorkersPython); a launcher library caller has no tpurun binary beside a python3
	python := spec.ResolvePython(f.Python, func(k string) string { return spec.LookupEnv(s.Env, k) }, "").Path
	if _, err := proc.LookPath(python); err != nil { // 127 or 126 before anything starts, as for a PROGRAM
		return &failure.ProgramError{Program: python, Err: err}
	}
	args := f.ArgsJSON
	if args == "" {
		args = "[]"
	}
	s.Program = append([]string{python, "-u", "-m", "tpurun.fn", "--args-json", args, f.Target}, f.Args...)
	return nil
}

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

// resolveRendezvous fills in what the rendezvous spec leaves to the environment, as detection read it once: the
// slice setting (MEGASCALE_NUM_SLICES, MEGASCALE_SLICE_ID) and the token (TPURUN_RDZV_TOKEN).
func (p *Prepared) resolveRendezvous() error {
	if err := p.discover(); err != nil {
		return err
	}
	r := &p.spec.Rendezvous
	if r.Solo() {
		return nil
	}
	if r.Token == "" {
		r.Token = spec.LookupEnv(p.spec.Env, "TPURUN_RDZV_TOKEN")
	}
	for _, v := range []struct {
		name       string
		dst        *int
		unset, def int
	}{{topology.EnvMegascaleNumSlices, &r.NumSlices, 0, 1}, {topology.EnvMegascaleSliceID, &r.SliceID, -1, 0}} {
		if *v.dst != v.unset {
			continue
		}
		*v.dst = v.def
		if p.Host == nil {
			continue
		}
		if val, ok := p.Host.Megascale()[v.name]; ok {
			n, err := topology.ParseMegascale(v.name, val.V)
			if err != nil {
				return &failure.ConfigError{Field: setting.Named(v.name), Value: val.V, Hint: "need a whole number from 0 (or unset it)"}
			}
			*v.dst = n
		}
	}
	return r.Validate()
}

// OpenRendezvous opens the backend of the job's rendezvous spec as Prepare resolved it (discovery, the token from
// the environment): the world of one, or the real one configured from it and the hosts detection found (static).
func (p *Prepared) OpenRendezvous(ctx context.Context) (*rendezvous.Rendezvous, error) {
	r, runID, h := p.spec.Rendezvous, p.spec.RunID, p.Host
	if r.Solo() { // it reads none of the settings: validateSolo checked those a world of one keeps
		return rendezvous.New(ctx, rendezvous.Config{Backend: r.Backend, Logger: p.Log})
	}
	conf, err := rendezvous.ParseConf(r.Conf)
	if err != nil {
		return nil, err
	}
	c := config(r, conf)
	c.Logger = p.Log
	if c.RunID == "" {
		c.RunID = runID
	}
	if c.Hosts, c.NodeRank, err = placement(r, conf, h); err != nil {
		return nil, err
	}
	if p.Layout != nil && p.Layout.Slices > 1 { // a slice's host list names only that slice's nodes: no host list
		c.Hosts = nil
	}
	rz, err := rendezvous.New(ctx, c)
	if errors.Is(err, rendezvous.ErrNoToken) {
		return nil, fmt.Errorf("%w; give every node the same secret: TPURUN_RDZV_TOKEN=SECRET in its environment, or --rdzv-token SECRET "+
			"(tpurun asks for one on an endpoint you name; torchrun's --master-addr line, and a TPU slice's hosts meeting by themselves, run without one, with a warning)", err)
	}
	if err == nil && rz.Unauthenticated() {
		p.Log.Warn("the rendezvous runs without a token, as torchrun's does: anyone who can reach "+rz.Endpoint()+" can join this job; "+
			"give every node the same TPURUN_RDZV_TOKEN=SECRET (or --rdzv-token SECRET) to require one", zap.String("endpoint", rz.Endpoint()))
	}
	return rz, err
}

// config is r as the rendezvous package takes it, before placement adds the host list and the node rank.
func config(r spec.RendezvousSpec, conf map[string]string) rendezvous.Config {
	return rendezvous.Config{Backend: r.Backend, Endpoint: r.Endpoint, RunID: r.RunID, Conf: conf, NNodes: r.NNodes, MinNodes: r.MinNodes,
		NodeRank: r.NodeRank, Timeout: r.Timeout, Token: r.Token, AllowUnauthenticated: r.AllowUnauthenticated}
}

// placement is the host list the rendezvous gets and the node rank of a fixed (static) world: the hosts option,
// else what detection read (Host.NodeHosts, Host.NodeRank: TPU_WORKER_HOSTNAMES, SLURM_JOB_NODELIST, ...). A node
// rank that was set wins. An elastic backend (tcp, etcd) takes only the host list (its first host names the
// default tcp endpoint) and assigns ranks itself. A malformed host list stops only a run whose backend needs it.
func placement(r spec.RendezvousSpec, conf map[string]string, h *topology.Host) ([]string, int, error) {
	b, err := rendezvous.Lookup(r.Backend)
	if err != nil {
		return nil, 0, err
	}
	var hosts []string
	var rank topology.Value[int]
	if h != nil {
		hosts, rank = h.NodeHosts.V, h.NodeRank
		if c := config(r, conf); h.NodeErr != nil && b.NeedsHosts(&c) && conf["hosts"] == "" {
			return nil, 0, h.NodeErr
		}
	}
	if v := conf["hosts"]; v != "" {
		if hosts, err = topology.ParseHostList(v); err != nil {
			return nil, 0, &failure.ConfigError{Field: setting.RendezvousHostsOption, Value: v, Hint: err.Error()}
		}
	}
	nodeRank := r.NodeRank
	if nodeRank < 0 && rank.IsSet() && !b.Elastic() { // a fixed world's ranks come with the launch
		nodeRank = rank.V
	}
	return hosts, nodeRank, nil
}

// Member is what this node brings to the join of generation g.
func (p *Prepared) Member(rz *rendezvous.Rendezvous, g int) (rendezvous.Member, error) {
	r := p.spec.Rendezvous
	slice := p.device().Kind().FixedSlice()
	m := rendezvous.Member{Instance: p.instance, Host: r.NodeName, Addr: r.NodeAddr, LocalWorkers: p.LocalWorkers,
		Accelerator: p.Accelerator, RunID: p.spec.RunID, SliceID: r.SliceID, NumSlices: max(r.NumSlices, 1),
		Rank: r.NodeRank, Generation: g, Ports: p.Ports, UnevenWorkers: !slice, Role: p.spec.Role}
	// A static world named by a host list takes each node's name and address from it; otherwise a node names itself
	// (rendezvous.Self: the benchmark's nodes are named by the same code).
	m, err := rz.Self(m, os.Hostname, os.Getpid())
	if err != nil {
		return m, fmt.Errorf("%w: %w", failure.ErrInternal, err)
	}
	return m, nil
}

// device is what this node runs on: the detected device, or a ready plan's.
func (p *Prepared) device() topology.Device {
	if p.Host != nil {
		return p.Host.Device.V
	}
	return p.Plan.Device
}

// World is what this node runs in one generation: the agreed plan, its place in it and the master the workers meet
// at. Met says the nodes met in a rendezvous to agree on it (a world of one agrees with itself: nothing to wait for,
// no rendezvous time to report).
type World struct {
	Plan       *topology.Plan
	NodeRank   int
	NNodes     int
	MasterAddr string
	MasterPort int
	Met        bool
}

// World is the world the assignment a describes: for a world of one, this host's plan as prepared and the master
// the spec gives; for a world of several, the plan of every node (checked for busy ports on this node) with node
// 0's master.
func (p *Prepared) World(a *rendezvous.Assignment) (World, error) {
	if p.spec.Rendezvous.Solo() {
		return World{Plan: p.Plan, NodeRank: p.NodeRank, NNodes: 1, MasterAddr: p.spec.MasterAddr, MasterPort: p.spec.MasterPort}, nil
	}
	p.Log.Info("rendezvous agreed", zap.Int("generation", a.Generation), zap.Int("node_rank", a.NodeRank), zap.Int("nnodes", a.NNodes),
		zap.Int("world_size", a.WorldSize), zap.String("master", net.JoinHostPort(a.MasterAddr, strconv.Itoa(a.MasterPort()))))
	w := topology.World{NodeRank: a.NodeRank, NumSlices: a.NumSlices, MegascaleCoordinator: a.MegascaleCoordinator,
		MegascalePort: a.Ports[rendezvous.PortMegascale]}
	for _, n := range a.AllNodes() { // names and addresses of the nodes this node needs: its slice's on TPU
		w.Nodes = append(w.Nodes, topology.WorldNode{Host: n.Host, Addr: n.Addr, LocalWorkers: n.LocalWorkers, SliceID: n.SliceID, Role: n.Role})
	}
	var plan *topology.Plan
	var err error
	if p.Host == nil { // a ready plan (Spec.Plan): its host split, spread over the agreed world
		plan = p.Plan.Spread(p.NodeRank, w)
	} else if plan, err = topology.NewPlan(p.Host, p.Request, w); err == nil {
		err = plan.CheckPorts(a.NodeRank, p.Host.ProcRoot, nil)
	}
	if err != nil {
		return World{}, err
	}
	if port := a.Ports[rendezvous.PortCoordinator]; port != 0 { // node 0's pick, shared by every node
		plan.SetJAXCoordinator(net.JoinHostPort(a.MasterAddr, strconv.Itoa(port)))
	}
	return World{Plan: plan, NodeRank: a.NodeRank, NNodes: a.NNodes, MasterAddr: a.MasterAddr, MasterPort: a.MasterPort(), Met: true}, nil
}
