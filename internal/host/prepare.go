package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/freeport"
	"tpurun/internal/preload"
	"tpurun/internal/proc"
	"tpurun/internal/spec"
	"tpurun/internal/topology"
	"tpurun/internal/workerenv"
	"tpurun/rendezvous"
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
	pyDir          string             // a private copy of the Python module (when the shared one cannot be used), removed at the end
	preload        *preload.Preloader // the preloaded interpreter (Spec.Preload); nil without
	solo           bool               // a world of one node, as the rendezvous spec says once resolved (resolveRendezvous)
}

// New is the preparation of this host for the job s (completed in place by Prepare): randomRunID says that its run
// id was made up at random (spec.Spec.WithDefaults); the reaper is the one lent to the run (nil without), and the
// consoles take the preloaded interpreter's own output.
func New(s *spec.Spec, randomRunID bool, log *zap.Logger, reaper *proc.Reaper, stdout, stderr *console.Console) *Prepared {
	return &Prepared{spec: s, randomRunID: randomRunID, Log: log, reaper: reaper, stdout: stdout, stderr: stderr,
		instance: rendezvous.NewInstance()}
}

// Preloader is the preloaded interpreter the workers are forked from, nil without --preload.
func (p *Prepared) Preloader() *preload.Preloader { return p.preload }

// Close ends the preloaded interpreter (first: it forwards its output to the consoles) and removes what the
// preparation made for the run alone.
func (p *Prepared) Close() {
	if p.preload != nil {
		p.preload.Close()
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
	if !p.solo {
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
	} else if err := checkMasterPort(s.MasterAddr, s.MasterPort, proc.Root); err != nil {
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
		return &failure.ConfigError{Field: failure.LogDir, Value: s.LogDir, Hint: err.Error()}
	}
	// A directory that no earlier run (or anyone else) can have prepared, created here exclusively (mkdir never
	// follows a planted final symlink).
	d, err := os.MkdirTemp(s.LogDir, s.RunID+"_")
	if err != nil {
		return &failure.ConfigError{Field: failure.LogDir, Value: s.LogDir, Hint: err.Error()}
	}
	p.RunLogs = filepath.Base(d)
	p.Log.Info("worker logs", zap.String("dir", d))
	return nil
}

// detect finds this host's devices exactly once, plans it as a world of one, and checks the chips and ports.
func (p *Prepared) detect(ctx context.Context) error {
	h, err := topology.Detect(ctx, p.spec.Detect, p.Log)
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
	if note := h.GPUShareNote(p.LocalWorkers); note != "" {
		p.Log.Warn(note)
	}
	return nil
}

// planLocal plans this host: as a world of one, its ports checked, or how many workers it brings to a world.
func (p *Prepared) planLocal(h *topology.Host) error {
	if r := p.spec.Rendezvous; !p.solo {
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

// startPreload starts the preloaded interpreter of the job (Spec.Preload; without, it does nothing) before any
// worker (preload.NewPreloader). ctx is the job's. From then on the workers are forked from it.
func (p *Prepared) startPreload(ctx context.Context) error {
	s := p.spec
	if len(s.Preload) == 0 {
		return nil
	}
	if p.reaper == nil { // the subreaper could not be had
		return spec.PreloadReaperError(strings.Join(s.Preload, ","))
	}
	var local []topology.Worker
	if p.Plan != nil && p.solo {
		local = p.Plan.Local(p.NodeRank)
	}
	env := workerenv.Shared(s.Env, p.Plan, local, p.LocalWorkers, workerenv.Runtime{RunID: s.RunID, Role: s.Role,
		MaxRestarts: s.MaxRestarts, MasterAddr: s.MasterAddr, MasterPort: s.MasterPort, SweepTag: s.SweepTag})
	j := preload.Job{Modules: s.Preload, Program: s.Program, PythonExec: spec.LookupEnv(s.Env, spec.EnvPythonExec), FnMode: s.Fn != nil,
		Dir: s.Dir, Env: env, Reaper: p.reaper, Stdout: p.stdout, Stderr: p.stderr, Log: p.Log}
	if p.Host != nil {
		j.DevRoot = p.Host.DevRoot
	}
	pl, err := preload.NewPreloader(ctx, j)
	p.preload = pl
	return err
}
