// Package job owns a job: Run checks its Spec, has the host prepared (package host), then runs generations: join
// the world through the rendezvous, plan it, meet at a barrier, run one attempt of the local workers (package
// attempt), collect their results, agree on the outcome with the other nodes, and restart the whole world after a
// failure while restarts are left. The job's verdict and the Report with its root cause come last. Errors that end
// a job outside an attempt, and a rendezvous's failures, become verdicts (verdictOf).
package job

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/attempt"
	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/host"
	"tpurun/internal/proc"
	"tpurun/internal/spec"
	"tpurun/internal/stop"
	"tpurun/rendezvous"
)

// Run runs a job on one host or many (a single host is a world of one), as the package says, restarting the
// whole world after a worker failure up to s.MaxRestarts times. One stop controller (stop.Controller) owns every
// reason to stop the run, in every phase.
//
// The error is nil when every worker exited 0 (and the result contract held). Otherwise, once anything could have
// started, it is the job's *stop.Verdict, from which failure.ExitCode takes the exit code (errors.As also finds the
// *proc.WorkerError, *failure.NodeError, *failure.SignalError or *failure.OutputError behind it); before that, a
// *failure.ConfigError, a detection error or a *failure.ProgramError. When Run returns, no process of the job is left:
// every group got SIGKILL and the orphan sweep ran.
func Run(ctx context.Context, s spec.Spec) (*spec.Report, error) {
	s, random, err := checked(s)
	if err != nil {
		return nil, err
	}
	relayDone := make(chan struct{})
	outErr := make(chan error, 1)
	j := newJob(s, outErr)
	sigs, rp, stopReaping := startReaping(s.Logger, s.Signals, !s.CatchSignals, !s.Reap)
	defer stopReaping() // last: the preloaded interpreter (closed with the job) is the reaper's
	j.reaper = rp
	j.host = host.New(&j.spec, random, j.log, rp, j.stdout, j.stderr)
	defer j.close()
	j.ctl = stop.NewController(ctx, s.Logger, s.Timeout, proc.Root, stop.Coalesce(sigs, relayDone), outErr,
		[]*console.Console{j.stdout, j.stderr})
	defer func() { // the run's signals end with its controller: one that comes later stays in sigs for the caller
		j.ctl.Close()
		close(relayDone)
	}()
	if err := j.host.Prepare(j.ctl.JobContext()); err != nil {
		return nil, j.stoppedOr(err, "the start")
	}
	j.log = j.host.Log // with the run id as discovery left it
	j.runner = j.newRunner()
	rz, err := j.host.OpenRendezvous(j.ctl.JobContext())
	if err != nil {
		return nil, j.stoppedOr(rendezvousErr("prepare", err), "the start")
	}
	defer func() { _ = rz.Close() }()
	// A node enters whichever generation the world is forming (a late, returning or replacement node waits for
	// the next one); afterwards each restart is the agreed generation + 1. A fixed world (static, or the world of
	// one) starts at generation 0.
	gen := 0
	if s.Rendezvous.Elastic() {
		gen = rendezvous.LatestGeneration
	}
	return j.generations(rz, gen)
}

// checked is s validated, with its defaults, its outputs and master address checked; random says that its run id
// was made up at random.
func checked(s spec.Spec) (_ spec.Spec, random bool, err error) {
	if err := s.Validate(); err != nil {
		return s, false, err
	}
	if s, random, err = s.WithDefaults(); err != nil {
		return s, false, err
	}
	if err := host.CheckOutputs(&s); err != nil {
		return s, false, err
	}
	return s, random, host.CheckMasterAddr(&s)
}

// generations runs generation gen and the restarts after it until the job is over.
func (j *job) generations(rz *rendezvous.Rendezvous, gen int) (*spec.Report, error) {
	rep := &spec.Report{RunID: j.spec.RunID, Program: j.spec.Program}
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
	if c := j.ctl.JobCause(); c != nil && errors.Is(err, context.Canceled) {
		return c.VerdictDuring(during, j.spec.Timeout)
	}
	return err
}

// outputVerdict is the job's verdict once its output is flushed: a write error on the launcher's stdout or stderr
// (which stopped the run) wins over the stop it caused.
func (j *job) outputVerdict(v *stop.Verdict) *stop.Verdict {
	for _, c := range j.own {
		_ = c.Flush()
	}
	for _, c := range []*console.Console{j.stdout, j.stderr} {
		if oe := c.Err(); oe != nil && (v == nil || v.Reason != stop.Output) {
			return &stop.Verdict{Reason: stop.Output, Code: failure.ExitCode(oe), Node: -1, Err: oe}
		}
	}
	if v == nil {
		return &stop.Verdict{Reason: stop.Done, Node: -1}
	}
	return v
}

// job is the state of one Run shared by its generations.
type job struct {
	spec           spec.Spec
	log            *zap.Logger
	obs            spec.Observers
	stdout, stderr *console.Console   // the same one when Stdout and Stderr are one file
	own            []*console.Console // the consoles Run made for plain writers: flushed and closed at the end
	sampler        *attempt.Sampler
	stopSampler    func()

	host   *host.Prepared    // this host made ready: detected, planned, ports, run directory, preload
	runner *attempt.Runner   // runs one attempt of this node's workers (once the host is prepared)
	joined time.Duration     // how long the last join took (reported as the rendezvous time where nodes met)
	ctl    *stop.Controller  // the one stop controller of the run
	term   *attempt.Terminal // the terminal whose input goes to local rank 0; nil without one
	reaper *proc.Reaper      // the process's reaper, lent to the job (startReaping); nil without one
}

func newJob(s spec.Spec, outErr chan<- error) *job {
	j := &job{spec: s, log: s.Logger.With(zap.String("run_id", s.RunID)), obs: spec.Observers(s.Observers)}
	j.stdout, j.stderr, j.own = console.Of(s.Stdout, s.Stderr)
	j.stdout.Notify(outErr)
	j.stderr.Notify(outErr)
	j.sampler = attempt.NewSampler(s.SampleInterval, func(smp []attempt.Sample) { j.obs.Emit(spec.Event{Kind: spec.Sampled, Samples: smp}) })
	sctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { j.sampler.Run(sctx) })
	j.stopSampler = func() { stop(); wg.Wait() }
	if s.StdinTo != console.StdinNone {
		j.term = attempt.OpenTerminal(s.Stdin)
	}
	return j
}

func (j *job) close() {
	if j.term != nil {
		j.term.Close()
	}
	if j.host != nil { // first: the preloaded interpreter forwards its output to the consoles
		j.host.Close()
	}
	for _, c := range j.own {
		_ = c.Flush()
		c.Close()
	}
	j.stopSampler()
}

// newRunner is the runner of this node's attempts, from the Spec as the host's preparation completed it.
func (j *job) newRunner() *attempt.Runner {
	s, h := &j.spec, j.host
	r := &attempt.Runner{Options: s.Options, RunLogs: h.RunLogs, Scratch: h.Scratch,
		Stdout: j.stdout, Stderr: j.stderr, Log: j.log, Reaper: j.reaper, Sampler: j.sampler, Term: j.term, Ctl: j.ctl,
		OnFailed: func(n int, we *proc.WorkerError) {
			j.obs.Emit(spec.Event{Kind: spec.WorkerFailed, Attempt: n, Failure: we})
		},
	}
	if pl := h.Preloader(); pl != nil {
		r.Starter = pl
	}
	return r
}
