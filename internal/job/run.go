package job

import (
	"context"
	"errors"

	"tpurun/internal/attempt"
	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/host"
	"tpurun/internal/spec"
	"tpurun/rendezvous"
)

// Run runs a job on one host or many: it detects this host once, checks everything that can be checked before a
// process starts, then runs generations — join the world, plan it, meet at a barrier, supervise one attempt of the
// local workers, collect their results, agree on the outcome — restarting the whole world after a worker failure
// up to s.MaxRestarts times. A single host is a world of one. One stop controller (attempt.Controller) owns every
// reason to stop the run, in every phase. Unless the Spec says otherwise, while Run runs it catches the signals a
// job acts on and this process reaps the job's orphans (Spec.Signals, Spec.NoReaper).
//
// The error is nil when every worker exited 0 (and the result contract held). Otherwise, once anything could have
// started, it is the job's *attempt.Verdict, from which failure.ExitCode takes the exit code (errors.As also finds the
// *failure.WorkerError, *failure.NodeError, *failure.SignalError or *failure.OutputError behind it); before that, a
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
	sigs, rp, stopReaping := attempt.StartReaping(s.Logger, s.Signals, s.NoSignals, s.NoReaper)
	defer stopReaping() // last: the preloaded interpreter (closed with the job) is the reaper's
	j.reaper = rp
	j.host = host.New(&j.spec, random, j.log, rp, j.stdout, j.stderr)
	defer j.close()
	j.ctl = attempt.NewController(ctx, s.Logger, s.Timeout, s.ProcRoot, attempt.Coalesce(sigs, relayDone), outErr,
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
func (j *job) outputVerdict(v *attempt.Verdict) *attempt.Verdict {
	for _, c := range j.own {
		_ = c.Flush()
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
