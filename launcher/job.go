package launcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"

	"go.uber.org/zap"

	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/proc"
	"tpurun/internal/topology"
	"tpurun/rendezvous"
)

// job is the state of one Run shared by its generations.
type job struct {
	spec           Spec
	log            *zap.Logger
	obs            observers
	stdout, stderr *console.Console   // the same one when Stdout and Stderr are one file
	own            []*console.Console // the consoles Run made for plain writers: flushed and closed at the end
	sampler        *sampler
	stopSampler    func()
	scratch        string // holds the error files when there is no log dir
	runLogs        string // this run's directory below Spec.LogDir, as torchrun names it: <run-id>_<random>
	pyDir          string // a private copy of the Python module (when the shared one cannot be used), removed at the end

	pyModule string     // the directory holding the Python module tpurun/ (on the workers' PYTHONPATH)
	starter  starter    // execs the workers, or forks them from the preloaded interpreter
	preload  *preloader // the preloaded interpreter (Spec.Preload); nil without

	host         *topology.Host      // detected once; nil with Spec.Plan
	layout       *topology.JobLayout // the job the host's environment described, when this run joins it (discover)
	request      topology.Request
	plan         *topology.Plan // this host as detected: the plan of a world of one
	nodeRank     int            // this host's node in plan
	localWorkers int
	accelerator  string
	instance     string
	ports        map[string]int // node 0's choice of ports is everyone's (master, coordinator, megascale)

	ctl    *controller  // the one stop controller of the run
	term   *terminal    // the terminal local rank 0 may get; nil without one
	reaper *proc.Reaper // the process's reaper, lent to the job (see useReaper); nil without one
}

func newJob(spec Spec, outErr chan<- error) *job {
	j := &job{spec: spec, log: spec.Logger.With(zap.String("run_id", spec.RunID)), obs: observers(spec.Observers),
		instance: rendezvous.NewInstance(), starter: execStarter{}}
	j.stdout, j.stderr, j.own = console.Of(spec.Stdout, spec.Stderr)
	j.stdout.Notify(outErr)
	j.stderr.Notify(outErr)
	j.sampler = newSampler(spec.SampleInterval, func(s []Sample) { j.obs.emit(Event{Kind: Sampled, Samples: s}) })
	sctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { j.sampler.run(sctx) })
	j.stopSampler = func() { stop(); wg.Wait() }
	if spec.StdinTo != console.StdinNone {
		j.term = openTerminal(spec.Stdin)
	}
	return j
}

func (j *job) close() {
	if j.preload != nil { // first: it forwards its output to the consoles
		j.preload.close()
	}
	for _, c := range j.own {
		_ = c.Flush()
		c.Close()
	}
	j.stopSampler()
	if j.scratch != "" {
		_ = os.RemoveAll(j.scratch)
	}
	if j.pyDir != "" {
		_ = os.RemoveAll(j.pyDir)
	}
}

// prepare is everything before the first join: detect once, plan this host, check the chips are free and the
// ports can be bound, set up function mode, pick the ports this node offers, and the error files' directory.
func (j *job) prepare(ctx context.Context) error {
	if err := j.planHost(ctx); err != nil {
		return err
	}
	if j.spec.Fn != nil {
		if err := j.setupFn(); err != nil {
			return err
		}
	}
	for _, step := range []func() error{j.pythonPath, j.pickPorts, j.makeRunDir} {
		if err := step(); err != nil {
			return err
		}
	}
	return j.startPreload(ctx) // last: what the workers' environment needs is known, and nothing else can fail
}

// planHost is this host's plan: a ready one (Spec.Plan), or detection's.
func (j *job) planHost(ctx context.Context) error {
	s := &j.spec
	if s.Plan == nil {
		return j.detect(ctx)
	}
	if err := j.resolveRendezvous(); err != nil {
		return err
	}
	j.plan, j.nodeRank = s.Plan, s.NodeRank
	j.localWorkers, j.accelerator = len(s.Plan.Local(s.NodeRank)), string(s.Plan.Device)
	return nil
}

// pickPorts picks the ports of a world of one (MASTER_PORT, free or checked; the JAX coordinator's), or those this
// node offers the world should it be node 0.
func (j *job) pickPorts() error {
	s := &j.spec
	if !s.Rendezvous.Solo() {
		ports, err := rendezvous.PickPorts()
		if err != nil {
			return fmt.Errorf("%w: %w", failure.ErrInternal, err)
		}
		ports[rendezvous.PortMegascale] = topology.DefaultMegascalePort
		if s.MasterPort != 0 { // node 0's choice, shared with every node
			ports[rendezvous.PortMaster] = s.MasterPort
		}
		j.ports = ports
		return nil
	}
	if s.MasterPort == 0 {
		p, err := rendezvous.FreePort(s.MasterAddr)
		if err != nil {
			return fmt.Errorf("%w: MASTER_PORT: %w; pass a port explicitly", failure.ErrInternal, err)
		}
		s.MasterPort = p
	} else if err := checkMasterPort(s.MasterAddr, s.MasterPort, s.ProcRoot); err != nil {
		return err
	}
	if j.plan.Device.Kind().JAXCoordinator() { // a port of its own (torch's store binds MASTER_PORT)
		p, err := rendezvous.FreePort(s.MasterAddr)
		if err != nil {
			return fmt.Errorf("%w: JAX coordinator port: %w", failure.ErrInternal, err)
		}
		j.plan.SetJAXCoordinator(net.JoinHostPort(s.MasterAddr, strconv.Itoa(p)))
	}
	return nil
}

// makeRunDir makes this run's directory: below the log directory, torchrun's layout
// <run-id>_<random>/attempt_<n>/<local rank>/; without one, a scratch directory for the error files.
func (j *job) makeRunDir() error {
	s := &j.spec
	if s.LogDir == "" {
		d, err := os.MkdirTemp("", "tpurun-"+s.RunID+"-")
		if err != nil {
			return fmt.Errorf("%w: directory for TORCHELASTIC_ERROR_FILE: %w; set TMPDIR or a log directory", failure.ErrInternal, err)
		}
		j.scratch = d
		return nil
	}
	if err := os.MkdirAll(s.LogDir, 0o755); err != nil {
		return &failure.ConfigError{Field: failure.SettingLogDir, Value: s.LogDir, Hint: err.Error()}
	}
	// A directory that no earlier run (or anyone else) can have prepared, created here exclusively (mkdir never
	// follows a planted final symlink).
	d, err := os.MkdirTemp(s.LogDir, s.RunID+"_")
	if err != nil {
		return &failure.ConfigError{Field: failure.SettingLogDir, Value: s.LogDir, Hint: err.Error()}
	}
	j.runLogs = filepath.Base(d)
	j.log.Info("worker logs", zap.String("dir", d))
	return nil
}

// detect finds this host's devices exactly once, plans it as a world of one, and checks the chips and ports.
func (j *job) detect(ctx context.Context) error {
	opts := j.spec.Detect
	opts.Logger = cmp.Or(opts.Logger, j.log)
	if opts.LookupEnv == nil {
		opts.LookupEnv = envLookup(j.spec.Env)
	}
	h, err := topology.Detect(ctx, opts)
	if err != nil {
		return err
	}
	j.host, j.request = h, j.spec.Request
	if err := j.resolveRendezvous(); err != nil {
		return err
	}
	h = j.host // a host on purpose alone is planned as a one-host slice (discover)
	if j.spec.PerCPU && h.Device.V.Kind().PerCore() {
		j.request.NProcs = runtime.NumCPU()
	}
	j.accelerator = string(h.Device.V)
	if t := h.AcceleratorType(); t != "" { // a TPU slice's type (v4-16): the nodes of one slice must agree on it
		j.accelerator = t
	}
	if err := j.planLocal(h); err != nil {
		return err
	}
	if err := j.checkChips(h); err != nil {
		return err
	}
	j.log.Debug("plan", zap.String("device", string(h.Device.V)), zap.Stringer("device_source", h.Device.Source),
		zap.Int("local_workers", j.localWorkers))
	warnIf(j.log, h.GPUShareNote(j.localWorkers))
	return nil
}

// planLocal plans this host: as a world of one, its ports checked, or how many workers it brings to a world.
func (j *job) planLocal(h *topology.Host) error {
	r := j.spec.Rendezvous
	if !r.Solo() {
		var err error
		j.localWorkers, err = topology.LocalWorkers(h, j.request, r.NNodes, r.NumSlices)
		return err
	}
	plan, err := topology.NewPlan(h, j.request)
	if err != nil {
		return err
	}
	j.plan, j.nodeRank = plan, topology.SoloNode(h, j.request)
	if err := j.plan.CheckPorts(j.nodeRank, h.ProcRoot, nil); err != nil {
		return err
	}
	j.localWorkers = len(j.plan.Local(j.nodeRank))
	return nil
}

// checkChips refuses chips another process holds, unless forced; a check that could not be made is a warning.
func (j *job) checkChips(h *topology.Host) error {
	switch err := h.CheckFree(); {
	case err == nil:
	case !errors.Is(err, topology.ErrChipBusy):
		j.log.Warn("could not check whether another process holds a chip", zap.Error(err))
	case j.spec.Force:
		j.log.Warn("starting although another process holds a chip (forced)", zap.Error(err))
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
