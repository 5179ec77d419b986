package job

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/attempt"
	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/host"
	"tpurun/internal/proc"
	"tpurun/internal/spec"
)

// job is the state of one Run shared by its generations.
type job struct {
	spec           spec.Spec
	log            *zap.Logger
	obs            spec.Observers
	stdout, stderr *console.Console   // the same one when Stdout and Stderr are one file
	own            []*console.Console // the consoles Run made for plain writers: flushed and closed at the end
	sampler        *attempt.Sampler
	stopSampler    func()

	host   *host.Prepared      // this host made ready: detected, planned, ports, run directory, preload
	runner *attempt.Runner     // runs one attempt of this node's workers (once the host is prepared)
	joined time.Duration       // how long the last join took (reported as the rendezvous time where nodes met)
	ctl    *attempt.Controller // the one stop controller of the run
	term   *attempt.Terminal   // the terminal whose input goes to local rank 0; nil without one
	reaper *proc.Reaper        // the process's reaper, lent to the job (attempt.StartReaping); nil without one
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
	r := &attempt.Runner{Program: s.Program, Env: s.Env, Dir: s.Dir, RunID: s.RunID, Role: s.Role, SweepTag: s.SweepTag,
		MaxRestarts: s.MaxRestarts, Grace: s.Grace, Timeout: s.Timeout, DrainTimeout: s.DrainTimeout,
		LogDir: s.LogDir, RunLogs: h.RunLogs, Scratch: h.Scratch,
		LocalRanksFilter: s.LocalRanksFilter, Redirects: s.Redirects, Tee: s.Tee, LogPrefix: s.LogPrefix, RawOutput: s.RawOutput,
		Stdout: j.stdout, Stderr: j.stderr, Stdin: s.Stdin, StdinTo: s.StdinTo,
		ProcRoot: s.ProcRoot, SweepSubtree: s.SweepSubtree,
		Log: j.log, Reaper: j.reaper, Sampler: j.sampler, Term: j.term, Ctl: j.ctl,
		OnStart: func(n int) { j.obs.Emit(spec.Event{Kind: spec.AttemptStarted, Attempt: n}) },
		OnFailed: func(n int, we *failure.WorkerError) {
			j.obs.Emit(spec.Event{Kind: spec.WorkerFailed, Attempt: n, Failure: we})
		},
	}
	if pl := h.Preloader(); pl != nil {
		r.Starter = pl
	}
	return r
}
