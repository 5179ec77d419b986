package launcher

import (
	"context"
	"errors"

	"tpurun/internal/attempt"
	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/rendezvous"
)

// Run runs a job on one host or many: it detects this host once, checks everything that can be checked before a
// process starts, then runs generations — join the world, plan it, meet at a barrier, supervise one attempt of the
// local workers, collect their results, agree on the outcome — restarting the whole world after a worker failure
// up to spec.MaxRestarts times. A single host is a world of one. One stop controller (control.go) owns every
// reason to stop the run, in every phase. Unless the Spec says otherwise, while Run runs it catches the signals a
// job acts on and this process reaps the job's orphans (Spec.Signals, Spec.NoReaper).
//
// The error is nil when every worker exited 0 (and the result contract held). Otherwise, once anything could have
// started, it is the job's *attempt.Verdict, from which failure.ExitCode takes the exit code (errors.As also finds the
// *failure.WorkerError, *failure.NodeError, *failure.SignalError or *failure.OutputError behind it); before that, a
// *failure.ConfigError, a detection error or a *failure.ProgramError. When Run returns, no process of the job is left:
// every group got SIGKILL and the orphan sweep ran.
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
	outErr := make(chan error, 1)
	j := newJob(spec, outErr)
	sigs, stopReaping := j.startReaping()
	defer stopReaping() // last: the preloaded interpreter (closed with the job) is the reaper's
	defer j.close()
	j.ctl = newController(ctx, &j.spec, coalesce(sigs, relayDone), outErr, []*console.Console{j.stdout, j.stderr}, j.term)
	defer func() { // the run's signals end with its controller: one that comes later stays in sigs for the caller
		j.ctl.close()
		close(relayDone)
	}()
	if err := j.prepare(j.ctl.jobContext()); err != nil {
		return nil, j.stoppedOr(err, "the start")
	}
	rz, err := openRendezvous(j.ctl.jobContext(), j.spec.Rendezvous, j.spec.RunID, j.host, spec.Env, j) // as prepare resolved it (discovery, the token from env)
	if err != nil {
		return nil, j.stoppedOr(rendezvousErr("prepare", err), "the start")
	}
	defer func() { _ = rz.Close() }()
	rep := &Report{RunID: j.spec.RunID, Program: j.spec.Program}
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
