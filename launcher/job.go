package launcher

import (
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

	"tpurun/launcher/attempt"
	"tpurun/launcher/console"
	"tpurun/launcher/exitcode"
	"tpurun/launcher/failure"
	"tpurun/launcher/proc"
	"tpurun/launcher/topology"
	"tpurun/rendezvous"
)

// Run runs a job on one host or many: it detects this host once, checks everything that can be checked before a
// process starts, then runs generations — join the world, plan it, meet at a barrier, supervise one attempt of the
// local workers, collect their results, agree on the outcome — restarting the whole world after a worker failure
// up to spec.MaxRestarts times. A single host is a world of one. One stop controller (control.go) owns every
// reason to stop the run, in every phase.
//
// The error is nil when every worker exited 0 (and the result contract held). Otherwise, once anything could have
// started, it is the job's *attempt.Verdict, from which failure.ExitCode takes the exit code (errors.As also finds the
// *failure.WorkerError, *failure.NodeError, *failure.SignalError or *failure.OutputError behind it); before that, a *failure.ConfigError, a detection
// error or a *failure.ProgramError. When Run returns, no process of the job is left: every group got SIGKILL and the
// orphan sweep ran.
func Run(ctx context.Context, spec Spec) (*Report, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	spec, err := spec.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := spec.checkOutputs(); err != nil {
		return nil, err
	}
	if err := spec.checkMasterAddr(); err != nil {
		return nil, err
	}
	relayDone := make(chan struct{})
	defer close(relayDone)
	outErr := make(chan error, 1)
	j := newJob(spec, outErr)
	sigs, stopReaping := j.startReaping()
	defer stopReaping() // last: the preloaded interpreter (closed with the job) is the reaper's
	defer j.close()
	j.ctl = newController(ctx, &j.spec, coalesce(sigs, relayDone), outErr, []*console.Console{j.stdout, j.stderr}, j.term)
	defer j.ctl.close()
	if err := j.prepare(j.ctl.jobContext()); err != nil {
		return nil, j.stoppedOr(err, "the start")
	}
	rz, err := openRendezvous(j.ctl.jobContext(), j.spec.Rendezvous, spec.RunID, j.host, spec.Env, j) // as prepare resolved it (the token from env)
	if err != nil {
		return nil, j.stoppedOr(rendezvousErr("prepare", err), "the start")
	}
	defer func() { _ = rz.Close() }()
	rep := &Report{RunID: spec.RunID, Program: j.spec.Program}
	// A node enters whichever generation the world is forming (a late, returning or replacement node waits for
	// the next one); afterwards each restart is the agreed generation + 1. A fixed world (static, or the world of
	// one) starts at generation 0.
	gen := 0
	if spec.Rendezvous.Elastic() {
		gen = rendezvous.LatestGeneration
	}
	for {
		next, v := j.generation(rz, gen, rep)
		if next < 0 {
			j.copyRootCause(rep)
			rep.Verdict = j.outputVerdict(v)
			if rep.Verdict.OK() && rep.Verdict.Err == nil {
				return rep, nil
			}
			return rep, rep.Verdict // also a code-0 end with something to say (a node that found its job closed)
		}
		gen = next
	}
}

// stoppedOr is err, or the verdict of the job-wide stop that made it fail (a signal during detection).
func (j *job) stoppedOr(err error, during string) error {
	if c := j.ctl.jobCause(); c != nil && errors.Is(err, context.Canceled) {
		return c.VerdictDuring(during, j.spec.Timeout)
	}
	return err
}

// outputVerdict is the job's verdict once its output is flushed: a write error on the launcher's stdout or stderr
// (which stopped the run) wins over the stop it caused.
func (j *job) outputVerdict(v *attempt.Verdict) *attempt.Verdict {
	for _, c := range j.own {
		_ = c.Flush(nil)
	}
	for _, c := range []*console.Console{j.stdout, j.stderr} {
		if oe := c.Err(); oe != nil && (v == nil || v.Reason != attempt.StopOutput) {
			return &attempt.Verdict{Reason: attempt.StopOutput, Code: failure.ExitCode(oe), Node: -1, Err: oe}
		}
	}
	if v == nil {
		return &attempt.Verdict{Reason: attempt.StopDone, Node: -1}
	}
	return v
}

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

	host         *topology.Host // detected once; nil with Spec.Plan
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
		_ = c.Flush(nil)
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
	s := &j.spec
	if s.Plan != nil {
		if err := j.resolveRendezvous(); err != nil {
			return err
		}
		j.plan, j.nodeRank = s.Plan, s.NodeRank
		j.localWorkers, j.accelerator = len(s.Plan.Local(s.NodeRank)), string(s.Plan.Device)
	} else if err := j.detect(ctx); err != nil {
		return err
	}
	if s.Fn != nil {
		if err := j.setupFn(); err != nil {
			return err
		}
	}
	if err := j.pythonPath(); err != nil {
		return err
	}
	if s.Rendezvous.Solo() {
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
	} else {
		ports, err := rendezvous.PickPorts()
		if err != nil {
			return fmt.Errorf("%w: %w", failure.ErrInternal, err)
		}
		if s.MasterPort != 0 { // node 0's choice, shared with every node
			ports[rendezvous.PortMaster] = s.MasterPort
		}
		j.ports = ports
	}
	if s.LogDir != "" {
		if err := os.MkdirAll(s.LogDir, 0o755); err != nil {
			return &failure.ConfigError{Field: failure.SettingLogDir, Value: s.LogDir, Hint: err.Error()}
		}
		// torchrun's layout, <run-id>_<random>/attempt_<n>/<local rank>/: a directory that no earlier run (or
		// anyone else) can have prepared, created here exclusively (mkdir never follows a planted final symlink).
		d, err := os.MkdirTemp(s.LogDir, s.RunID+"_")
		if err != nil {
			return &failure.ConfigError{Field: failure.SettingLogDir, Value: s.LogDir, Hint: err.Error()}
		}
		j.runLogs = filepath.Base(d)
		j.log.Info("worker logs", zap.String("dir", d))
	} else {
		d, err := os.MkdirTemp("", "tpurun-"+s.RunID+"-")
		if err != nil {
			return fmt.Errorf("%w: directory for TORCHELASTIC_ERROR_FILE: %w; set TMPDIR or a log directory", failure.ErrInternal, err)
		}
		j.scratch = d
	}
	return j.startPreload(ctx) // last: what the workers' environment needs is known, and nothing else can fail
}

// detect finds this host's devices exactly once, plans it as a world of one, and checks the chips and ports.
func (j *job) detect(ctx context.Context) error {
	s := &j.spec
	opts := s.Detect
	if opts.Logger == nil {
		opts.Logger = j.log
	}
	if opts.LookupEnv == nil {
		env := s.Env
		opts.LookupEnv = func(k string) (string, bool) {
			for i := len(env) - 1; i >= 0; i-- {
				if kk, v, ok := cutEnv(env[i]); ok && kk == k {
					return v, true
				}
			}
			return "", false
		}
	}
	h, err := topology.Detect(ctx, opts)
	if err != nil {
		return err
	}
	j.host = h
	j.request = s.Request
	if err := j.resolveRendezvous(); err != nil {
		return err
	}
	if s.PerCPU && h.Device.V.Kind().PerCore() {
		j.request.NProcs = runtime.NumCPU()
	}
	j.accelerator = string(h.Device.V)
	if h.Accelerator.IsSet() { // a TPU slice's type (v4-16): the nodes of one slice must agree on it
		j.accelerator = h.Accelerator.V.Type
	}
	r := s.Rendezvous
	if r.Solo() {
		if j.plan, err = topology.NewPlan(h, j.request); err != nil {
			return err
		}
		j.nodeRank = topology.SoloNode(h, j.request)
		if err := j.plan.CheckPorts(j.nodeRank, h.ProcRoot, nil); err != nil {
			return err
		}
		j.localWorkers = len(j.plan.Local(j.nodeRank))
	} else if j.localWorkers, err = topology.LocalWorkers(h, j.request, r.NNodes, r.NumSlices); err != nil {
		return err
	}
	switch err := h.CheckFree(); {
	case err == nil:
	case !errors.Is(err, topology.ErrChipBusy):
		j.log.Warn("could not check whether another process holds a chip", zap.Error(err))
	case s.Force:
		j.log.Warn("starting although another process holds a chip (forced)", zap.Error(err))
	default:
		return err
	}
	j.log.Debug("plan", zap.String("device", string(h.Device.V)), zap.Stringer("device_source", h.Device.Source),
		zap.Int("local_workers", j.localWorkers))
	warnIf(j.log, h.GPUShareNote(j.localWorkers))
	return nil
}

func cutEnv(kv string) (string, string, bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], i > 0
		}
	}
	return "", "", false
}

// rendezvousErr marks a rendezvous failure as failure.ErrRendezvous (exit 69), keeping configuration errors as they are
// (exit 2).
func rendezvousErr(step string, err error) error {
	if exitcode.IsUsage(err) {
		return err
	}
	var se *failure.SignalError
	if errors.As(err, &se) || errors.Is(err, context.Canceled) || errors.Is(err, rendezvous.ErrJobClosed) {
		return err
	}
	if errors.Is(err, rendezvous.ErrDuplicateNode) {
		return fmt.Errorf("%w: %s: %w; if two tpurun agents share this host, give each its own --node-name (or --node-rank)", failure.ErrRendezvous, step, err)
	}
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound {
		return &failure.ConfigError{Field: failure.SettingRendezvousEndpoint, Value: dns.Name,
			Hint: "this host name does not resolve (no such host); check its spelling, or give node 0's IP address (--rdzv-endpoint, or --master-addr for the static rendezvous)"}
	}
	return fmt.Errorf("%w: %s: %w", failure.ErrRendezvous, step, err)
}
