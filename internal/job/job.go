// Package job owns a job: Run checks its Spec, has the host prepared (package host), then runs generations: join
// the world through the rendezvous, plan it, meet at a barrier, run one attempt of the local workers (package
// attempt), collect their results, agree on the outcome with the other nodes, and restart the whole world after a
// failure while restarts are left. The job's verdict and the Report with its root cause come last. Errors that end
// a job outside an attempt, and a rendezvous's failures, become verdicts (verdictOf).
package job

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/attempt"
	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/host"
	"tpurun/internal/proc"
	"tpurun/internal/results"
	"tpurun/internal/spec"
	"tpurun/internal/stop"
	"tpurun/internal/topology"
	"tpurun/rendezvous"
	"tpurun/worker"
)

// Run runs a job on one host or many: it detects this host once, checks everything that can be checked before a
// process starts, then runs generations — join the world, plan it, meet at a barrier, supervise one attempt of the
// local workers, collect their results, agree on the outcome — restarting the whole world after a worker failure
// up to s.MaxRestarts times. A single host is a world of one. One stop controller (stop.Controller) owns every
// reason to stop the run, in every phase. When the Spec asks, while Run runs it catches the signals a
// job acts on and this process reaps the job's orphans (Spec.CatchSignals, Spec.Reap).
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
	j.ctl = stop.NewController(ctx, s.Logger, s.Timeout, s.ProcRoot, stop.Coalesce(sigs, relayDone), outErr,
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
	r := &attempt.Runner{Program: s.Program, Env: s.Env, Dir: s.Dir, RunID: s.RunID, Role: s.Role, SweepTag: s.SweepTag,
		MaxRestarts: s.MaxRestarts, Grace: s.Grace, Timeout: s.Timeout, DrainTimeout: s.DrainTimeout,
		LogDir: s.LogDir, RunLogs: h.RunLogs, Scratch: h.Scratch,
		LocalRanksFilter: s.LocalRanksFilter, Redirects: s.Redirects, Tee: s.Tee, LogPrefix: s.LogPrefix, RawOutput: s.RawOutput,
		Stdout: j.stdout, Stderr: j.stderr, Stdin: s.Stdin, StdinTo: s.StdinTo,
		ProcRoot: s.ProcRoot, SweepSubtree: s.SweepSubtree,
		Log: j.log, Reaper: j.reaper, Sampler: j.sampler, Term: j.term, Ctl: j.ctl,
		OnStart: func(n int) { j.obs.Emit(spec.Event{Kind: spec.AttemptStarted, Attempt: n}) },
		OnFailed: func(n int, we *proc.WorkerError) {
			j.obs.Emit(spec.Event{Kind: spec.WorkerFailed, Attempt: n, Failure: we})
		},
	}
	if pl := h.Preloader(); pl != nil {
		r.Starter = pl
	}
	return r
}

// exitBarrierTimeout bounds the exchange of outcomes after the local workers are gone: a node that vanished
// without a word cannot hold the others for longer (the backends also report it lost after a heartbeat). A stop
// (a signal, the timeout, a lost store) ends the exchange at once.
const exitBarrierTimeout = 5 * time.Minute

// stoppedExchangeSlack is how much longer than the grace period a node that was stopped (a signal, the timeout)
// waits for the other nodes' outcome: they were told at once, and stop their workers within their grace.
const stoppedExchangeSlack = 10 * time.Second

// ended is an attempt that ended, and the controller's count of job-wide causes then (stop.Controller.StopSeq).
type ended struct {
	att     *attempt.Attempt
	stopSeq int
}

// generation runs generation g of the world (rendezvous.LatestGeneration: the one being formed): join, plan,
// barrier, one attempt of the local workers, collect, agree on the outcome. next is the generation every node
// joins when the world failed or lost a node and may restart (restarts left, at least the minimum of nodes, no
// job-wide stop), and -1 when the job is over with the verdict v.
func (j *job) generation(rz *rendezvous.Rendezvous, g int, rep *spec.Report) (next int, v *stop.Verdict) {
	j.ctl.BeginGeneration()
	s, v := j.join(rz, g)
	if v != nil {
		return -1, closedVerdict(v, len(rep.Attempts) > 0)
	}
	defer func() { _ = s.Close() }()
	a := s.Assignment()
	g = a.Generation // the world's count of restarts, whatever this node joined as
	w, v := j.agree(s, a)
	if v != nil {
		return j.lost(g, v)
	}
	// Another node's failure stops this node's attempt (through the controller); this node's own stop is told to
	// the others at once.
	var bg sync.WaitGroup
	defer func() { // closing the session ends its Failures: the reader below returns
		_ = s.Close()
		bg.Wait()
	}()
	bg.Go(func() {
		for f := range s.Failures() {
			j.log.Warn("another node: "+f.String(), zap.Stringer("failure", f))
			j.ctl.Stop(causeOf(f))
		}
	})
	coll := j.newCollector(w.Plan, w.NodeRank)
	att, seq := j.runner.Run(attempt.Spec{N: g, Plan: w.Plan, NodeRank: w.NodeRank, MasterAddr: w.MasterAddr,
		MasterPort: w.MasterPort, Sink: coll, Announce: func(c *stop.Cause) {
			bg.Go(func() { j.announce(s, c) })
		}})
	rep.Attempts = append(rep.Attempts, att)
	j.obs.Emit(spec.Event{Kind: spec.AttemptEnded, Attempt: g, Ended: att, Report: rep})
	return j.conclude(s, a, ended{att, seq}, coll, rep)
}

// announce tells the other nodes that this node stops, within a short bound (a dead store must not hold it).
func (j *job) announce(s rendezvous.Session, c *stop.Cause) {
	f := rendezvous.Failure{WorkerRank: -1, Reason: c.String()}
	if c.Failure != nil {
		f.WorkerRank = c.Failure.Rank
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Fail(ctx, f); err != nil {
		j.log.Warn("could not tell the other nodes", zap.Error(err))
	}
}

// agree is this node's part of the world of a: its world (a world of one is this host's plan) and the barrier
// before the start.
func (j *job) agree(s rendezvous.Session, a *rendezvous.Assignment) (host.World, *stop.Verdict) {
	w, err := j.host.World(a)
	if err != nil {
		_ = s.Fail(j.ctl.JobContext(), rendezvous.Failure{WorkerRank: -1, Reason: "planning failed: " + err.Error()})
		return w, verdictOf(err)
	}
	if w.Met { // the join's time, where nodes met (a world of one has none to report)
		j.obs.Emit(spec.Event{Kind: spec.RendezvousDone, Attempt: a.Generation, Rendezvous: j.joined})
	}
	ctx := j.ctl.JobContext()
	if err := s.Barrier(ctx, "start"); err != nil {
		return w, j.stopVerdict(ctx, "the barrier before the start", verdictOf(rendezvousErr("barrier before the start", err)))
	}
	return w, nil
}

// stopVerdict is the verdict of a wait that failed: the controller's cause when it ended the wait, else v.
func (j *job) stopVerdict(ctx context.Context, during string, v *stop.Verdict) *stop.Verdict {
	if c := stop.CauseOf(ctx); c != nil {
		return c.VerdictDuring(during, j.spec.Timeout)
	}
	return v
}

// conclude exchanges this node's outcome of generation g for the world's verdict (node 0 merges every node's
// results and decides the code every node exits with) and says what comes next: a restart, or the end.
func (j *job) conclude(s rendezvous.Session, a *rendezvous.Assignment, e ended, coll *results.Collector, rep *spec.Report) (int, *stop.Verdict) {
	att := e.att
	mine := outcome{Node: a.NodeRank, Verdict: published(att.Verdict)}
	if a.NodeRank != 0 {
		mine.WantDocument = j.spec.Results.Document || j.spec.Results.File != ""
		mine.Results = coll.Share()
		mine.Exits = att.ResultExits()
	}
	bound := exitBarrierTimeout
	if j.ctl.JobCause() != nil { // the others were told and stop within their grace: no longer than that
		bound = min(bound, j.spec.Grace+stoppedExchangeSlack)
	}
	tctx, tcancel := context.WithTimeout(context.Background(), bound)
	defer tcancel()
	ctx, cancel := j.ctl.WaitContext(tctx, e.stopSeq) // not the job's context: a node that stopped still reports how
	defer cancel()
	all, err := publishGather(ctx, s, "outcome", mine, a.NNodes)
	if err != nil {
		return j.noVerdict(ctx, s, a.Generation, att, err)
	}
	wv, failed := worldVerdict(all)
	final := outcome{Node: a.NodeRank, Verdict: wv}
	var jobV *stop.Verdict
	if a.NodeRank == 0 {
		jobV = j.worldResults(all, att, coll, wv, failed, rep)
		final.Verdict = published(jobV)
		final.Verdict.Node = wv.Node
		for _, oc := range all[1:] {
			if oc.WantDocument {
				final.Document = rep.Results
				break
			}
		}
	}
	finals, err := publishGather(ctx, s, "final", final, a.NNodes)
	if err != nil {
		return j.noVerdict(ctx, s, a.Generation, att, err)
	}
	next, v := j.next(a, att, mine, finals[0], jobV, failed, rep)
	j.leave(ctx, s, a.Generation, next < 0, finals[0].Verdict.Code)
	return next, v
}

// leave ends this node's part in generation g once the world's verdict is known: when the job ends there (last:
// no restart follows), it first closes the job with the world's code, so that a node waiting for a next
// generation, or arriving late, learns that the job is over (Session.Finish); then it leaves.
func (j *job) leave(ctx context.Context, s rendezvous.Session, g int, last bool, code int) {
	if last {
		if err := s.Finish(ctx, code); err != nil {
			j.log.Warn("could not record that the job closed", zap.Int("generation", g), zap.Error(err))
		}
	}
	_ = s.Leave(ctx)
}

// closedVerdict is v, unless the join found the job already finished (rendezvous.ErrJobClosed: a late node, or a
// restart the other nodes did not make): then this node's end, stop.Closed, with code 0 for a node that ran no
// attempt of the job and the job's code for one that did.
func closedVerdict(v *stop.Verdict, ran bool) *stop.Verdict {
	var jc *rendezvous.JobClosedError
	if !errors.As(v, &jc) {
		return v
	}
	e := &failure.JobClosedError{Err: jc, Code: jc.ExitCode, Ran: ran}
	return &stop.Verdict{Reason: stop.Closed, Code: e.ExitStatus(), Node: -1, Err: e}
}

// worldResults is node 0's verdict of the world: every node's results and exits merged into the document (exactly
// once per replica, world-wide), which is written, and its code.
func (j *job) worldResults(all []outcome, att *attempt.Attempt, coll *results.Collector, wv stop.Verdict, failed bool, rep *spec.Report) *stop.Verdict {
	exits := att.ResultExits()
	for _, oc := range all[1:] {
		if err := coll.Add(oc.Node, oc.Results); err != nil {
			j.log.Error("results of another node break the contract", zap.Int("node", oc.Node), zap.Error(err))
		}
		exits = append(exits, oc.Exits...)
	}
	var worldErr error
	switch {
	case failed && wv.Node == 0:
		worldErr = att.Verdict
	case failed:
		worldErr = remoteVerdict(wv.Node, wv.Code, wv.Message)
	}
	doc, err := j.finishResults(exits, coll, worldErr)
	rep.Results = doc
	if err == nil {
		return &stop.Verdict{Reason: stop.Done, Node: 0}
	}
	v := verdictOf(err)
	if !failed && v.Code != 0 {
		v.Message = "the results of the world break the contract (see node 0): " + err.Error()
	}
	return v
}

// remoteVerdict is the verdict of a node that ends because node decided so: its code is the world's.
func remoteVerdict(node, code int, msg string) *stop.Verdict {
	return &stop.Verdict{Reason: stop.Remote, Code: code, Node: node, Message: msg,
		Err: &failure.NodeError{Node: node, Code: code, Message: msg}}
}

// next turns the world's final verdict into this node's: node 0 its own decision, the failed node its own
// verdict, every other node the world's; then restarts the world as generation g+1 when it failed and may.
func (j *job) next(a *rendezvous.Assignment, att *attempt.Attempt, mine, final outcome, jobV *stop.Verdict, failed bool, rep *spec.Report) (int, *stop.Verdict) {
	var docErr error
	if a.NodeRank != 0 && mine.WantDocument && final.Document != nil {
		rep.Results, docErr = final.Document, j.writeResultsFile(final.Document)
	}
	fv := final.Verdict
	var v *stop.Verdict
	switch {
	case fv.Code == 0 && docErr != nil:
		return -1, verdictOf(docErr)
	case fv.Code == 0:
		return -1, nil
	case a.NodeRank == 0:
		v = jobV
	case failed && fv.Node == a.NodeRank && att.Verdict.Code != 0:
		v = att.Verdict
	default:
		v = remoteVerdict(fv.Node, fv.Code, fv.Message)
	}
	g := a.Generation
	if failed && j.restartable(g, att) {
		j.logRestart(a.NNodes, g, fv.Node, fv.Code, v.Summary())
		return g + 1, nil
	}
	return -1, v
}

// logRestart says that generation g of a world of nnodes failed (node's worker, code, the verdict) and the next one
// starts: in a world's words, or on one node in its own (no world, node or generation to speak of).
func (j *job) logRestart(nnodes, g, node, code int, verdict string) {
	if nnodes == 1 {
		j.log.Warn("a worker failed: restarting the workers", zap.Int("failed_attempt", g), zap.Int("next_attempt", g+1),
			zap.Int("max_restarts", j.spec.MaxRestarts), zap.Int("code", code), zap.String("verdict", verdict))
		return
	}
	j.log.Warn("the world failed: restarting every node as the next generation", zap.Int("failed_generation", g),
		zap.Int("next_generation", g+1), zap.Int("max_restarts", j.spec.MaxRestarts), zap.Int("failed_node", node),
		zap.Int("code", code), zap.String("verdict", verdict))
}

// noVerdict is the end of a node that could not learn the world's verdict: when a stop ended the wait, the first
// cause (this node's own attempt's, or that stop), and the other nodes are told; when a node is lost, a restart if
// one is left; else its own failure if it had one, or a rendezvous failure.
func (j *job) noVerdict(ctx context.Context, s rendezvous.Session, g int, att *attempt.Attempt, err error) (int, *stop.Verdict) {
	if c := stop.CauseOf(ctx); c != nil {
		j.log.Warn(c.String() + " while waiting for the other nodes' outcome: stopping the run")
		j.announce(s, c)
		if att.Verdict.Code != 0 && att.Verdict.Own() {
			return -1, att.Verdict
		}
		return -1, c.VerdictDuring("the wait for the other nodes' outcome", j.spec.Timeout)
	}
	v := verdictOf(fmt.Errorf("%w: no world-wide verdict: %w", failure.ErrRendezvous, err))
	if errors.Is(err, rendezvous.ErrNodeLost) {
		if next, _ := j.lost(g, v); next >= 0 {
			return next, nil
		}
	}
	if att.Verdict.Code != 0 && att.Verdict.Own() {
		return -1, att.Verdict
	}
	return -1, v
}

// lost decides what a node does when generation g could not agree because a node of the world is gone: with
// restarts left (and no job-wide stop) the survivors join generation g+1 — the join completes with at least the
// minimum of nodes, or fails naming who is missing; otherwise the job ends with v.
func (j *job) lost(g int, v *stop.Verdict) (int, *stop.Verdict) {
	if !errors.Is(v, rendezvous.ErrNodeLost) || !j.restartable(g, nil) {
		return -1, v
	}
	j.log.Warn("a node of the world was lost: the survivors restart as the next generation", zap.Int("lost_generation", g),
		zap.Int("next_generation", g+1), zap.Int("max_restarts", j.spec.MaxRestarts), zap.Error(v))
	return g + 1, nil
}

// restartable reports whether the job may start generation g+1 after g failed (att, when it ran): restarts left,
// and no job-wide stop — a signal, the timeout, the caller's cancellation, a lost store — ended it.
func (j *job) restartable(g int, att *attempt.Attempt) bool {
	if g >= j.spec.MaxRestarts {
		return false
	}
	if c := j.ctl.JobCause(); c != nil {
		j.log.Warn("not restarting: " + c.String())
		return false
	}
	return att == nil || !att.Verdict.Reason.JobWide()
}

// join enters generation g; a job-wide stop before or during the join ends the job with its verdict.
func (j *job) join(rz *rendezvous.Rendezvous, g int) (rendezvous.Session, *stop.Verdict) {
	m, err := j.host.Member(rz, g)
	if err != nil {
		return nil, verdictOf(err)
	}
	ctx := j.ctl.JobContext()
	if c := j.ctl.JobCause(); c != nil {
		return nil, c.VerdictDuring("the rendezvous join", j.spec.Timeout)
	}
	start := time.Now()
	s, err := rz.Join(ctx, m)
	if err != nil {
		return nil, j.stopVerdict(ctx, "the rendezvous join",
			verdictOf(rendezvousErr(fmt.Sprintf("join of generation %d (run %s, %s backend)", g, j.spec.RunID, j.spec.Rendezvous.Backend), err)))
	}
	j.joined = time.Since(start)
	return s, nil
}

// newCollector is the result collector of one attempt of this node's workers in plan.
func (j *job) newCollector(plan *topology.Plan, nodeRank int) *results.Collector {
	return results.NewCollector(results.Options{
		MaxFrameBytes: j.spec.Results.MaxFrameBytes,
		Required:      j.spec.Results.Required,
		RunID:         j.spec.RunID,
		WorldSize:     len(plan.Workers),
		Nodes:         max(1, len(plan.Nodes)),
		NodeRank:      nodeRank,
		Logger:        j.log,
		OnResult:      func() { j.obs.Emit(spec.Event{Kind: spec.ResultReceived}) },
	})
}

// outcome is what each node publishes when its workers are gone: the world-wide verdict is computed from them.
type outcome struct {
	Node int `json:"node"`
	// Verdict is how this node's attempt ended (in "outcome"), or the world's verdict as node 0 decided it, with
	// the code every node exits with (in "final").
	Verdict stop.Verdict       `json:"verdict"`
	Results *results.Share     `json:"results,omitempty"` // this node's workers, results and violations (node 0 merges them)
	Exits   []results.RankExit `json:"exits,omitempty"`   // how this node's workers ended (node 0 builds the document)
	// WantDocument: this node's caller wants the results document (--json, --results); node 0 then puts the
	// world's document in its final outcome, and only then.
	WantDocument bool              `json:"want_document,omitempty"`
	Document     *results.Document `json:"document,omitempty"`
}

// published is v as another node reads it: its words instead of its error.
func published(v *stop.Verdict) stop.Verdict {
	p := *v
	if p.Message == "" && p.Code != 0 {
		p.Message = v.Summary()
	}
	p.Err = nil
	return p
}

// worldVerdict picks the world's verdict from every node's outcome: the lowest node whose own cause ended its
// attempt with a non-zero code, else the first non-zero code by node rank; failed is false when every node
// succeeded.
func worldVerdict(all []outcome) (v stop.Verdict, failed bool) {
	for _, o := range all {
		if o.Verdict.Own() && o.Verdict.Code != 0 {
			v = o.Verdict
			v.Node = o.Node
			return v, true
		}
	}
	for _, o := range all {
		if o.Verdict.Code != 0 {
			v = o.Verdict
			v.Node = o.Node
			return v, true
		}
	}
	return stop.Verdict{Reason: stop.Done}, false
}

// publishGather publishes this node's outcome and returns every node's, in node-rank order. An outcome travels in
// pieces of at most pieceSize(nodes) bytes, one round per piece, so that any results document node 0 can write
// (every result up to --max-result-bytes) crosses the rendezvous whatever its message limit: a round's gather
// carries one piece of every node, which stays well under the TCP rendezvous's 4 MiB message and etcd's 1.5 MiB
// request. The first piece says how many follow.
func publishGather(ctx context.Context, s rendezvous.Session, key string, mine outcome, nodes int) ([]outcome, error) {
	b, err := json.Marshal(mine)
	if err != nil {
		return nil, err
	}
	size := pieceSize(nodes)
	pieces := max(1, (len(b)+size-1)/size)
	piece := func(i int) []byte {
		if i*size >= len(b) {
			return nil
		}
		return b[i*size : min(len(b), (i+1)*size)]
	}
	first := append(strconv.AppendInt(nil, int64(pieces), 10), '\n')
	got, err := exchange(ctx, s, key, append(first, piece(0)...))
	if err != nil {
		return nil, err
	}
	bufs := make([][]byte, len(got))
	rounds := 1
	for n := range got {
		head, rest, ok := bytes.Cut(got[n], []byte{'\n'})
		k, perr := strconv.Atoi(string(head))
		if !ok || perr != nil || k < 1 {
			return nil, fmt.Errorf("%s of node %d: not a piece count: %.20q", key, n, head)
		}
		bufs[n] = append(bufs[n], rest...)
		rounds = max(rounds, k)
	}
	for i := 1; i < rounds; i++ {
		more, err := exchange(ctx, s, key+"."+strconv.Itoa(i), piece(i))
		if err != nil {
			return nil, err
		}
		for n := range bufs {
			bufs[n] = append(bufs[n], more[n]...)
		}
	}
	all := make([]outcome, 0, len(bufs))
	for n, buf := range bufs {
		var oc outcome
		if err := json.Unmarshal(buf, &oc); err != nil {
			return nil, fmt.Errorf("%s of node %d: %w", key, n, err)
		}
		oc.Node = n
		all = append(all, oc)
	}
	return all, nil
}

// pieceSize is how many bytes of an outcome one round carries per node: a round's gather holds every node's
// piece (base64 in the TCP rendezvous's JSON frames: 4/3 of it), within 1 MiB in all.
func pieceSize(nodes int) int {
	return max(16<<10, min(512<<10, (1<<20)/max(1, nodes)))
}

// exchange publishes data under key and gathers every node's, in node-rank order.
func exchange(ctx context.Context, s rendezvous.Session, key string, data []byte) ([][]byte, error) {
	if err := s.Publish(ctx, key, data); err != nil {
		return nil, err
	}
	got, err := s.Gather(ctx, key)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(got))
	for n := range out {
		v, ok := got[n]
		if !ok {
			return nil, fmt.Errorf("%s: node %d published nothing", key, n)
		}
		out[n] = v
	}
	return out, nil
}

// finishResults builds the results document of the last attempt (node 0: of the whole world), decides the
// outcome of the job from the workers' error runErr and the document (outcome), writes the results file, and
// returns the document and the job's error.
func (j *job) finishResults(exits []results.RankExit, c *results.Collector, runErr error) (*results.Document, error) {
	doc, violations := c.Finish(exits)
	doc.RunID = j.spec.RunID
	err := j.outcome(doc, violations, runErr)
	if werr := j.writeResultsFile(doc); werr != nil && err == nil {
		err = werr
	}
	return doc, err
}

// outcome decides doc's exit code in results.Document.Decide's order and returns the job's error to match: the
// run's failure (runFailure) wins; then the contract's violations (a *failure.ResultsError, 65); then the replicas'
// errors (a *results.ReplicaError, 1); then the result sink's complaint about a channel that failed between frames
// (runErr, failure.ErrResults), which the document does not hold.
func (j *job) outcome(doc *results.Document, violations, runErr error) error {
	if fail := j.runFailure(doc, runErr); fail != nil {
		doc.Decide(failure.ExitCode(fail))
		return fail
	}
	switch doc.Decide(failure.ExitOK) {
	case failure.ExitResults:
		return &failure.ResultsError{Violations: leaves(violations), Replicas: len(doc.ReplicaErrors())}
	case failure.ExitReplicaError:
		return &results.ReplicaError{Replicas: doc.ReplicaErrors()}
	}
	if runErr != nil {
		doc.Decide(failure.ExitCode(runErr))
	}
	return runErr
}

// runFailure is what failed the run whatever its results say: a function target the runner could not use (a
// *failure.ConfigError, exit 2, first of all), a worker's or another node's failure, or any error of the run but the
// result sink's complaint (failure.ErrResults). It is nil when the results decide.
func (j *job) runFailure(doc *results.Document, runErr error) error {
	if err := j.targetError(doc); err != nil {
		return err
	}
	var we *proc.WorkerError
	var ne *failure.NodeError
	switch {
	case runErr == nil:
		return nil
	case errors.As(runErr, &we), errors.As(runErr, &ne), !errors.Is(runErr, failure.ErrResults):
		return runErr
	}
	return nil
}

// targetError is the configuration error of a function target the runner could not use (its replicas report
// worker.TargetErrorType), or nil.
func (j *job) targetError(doc *results.Document) error {
	if j.spec.Fn == nil {
		return nil
	}
	for _, r := range doc.ReplicaErrors() {
		if r.Error.Type == worker.TargetErrorType {
			return &failure.ConfigError{Field: failure.Function, Value: j.spec.Fn.Target, Hint: r.Error.Message}
		}
	}
	return nil
}

// leaves is the errors a joined error holds (err itself when it holds none).
func leaves(err error) []error {
	if u, ok := err.(interface{ Unwrap() []error }); ok {
		return u.Unwrap()
	}
	return []error{err}
}

// writeResultsFile writes doc to the results file, if one is asked for; a failure is logged and returned as an
// *failure.OutputError.
func (j *job) writeResultsFile(doc *results.Document) error {
	f := j.spec.Results.File
	if f == "" {
		return nil
	}
	if err := results.WriteFile(f, doc); err != nil {
		j.log.Error("could not write the results file", zap.String("file", f), zap.Error(err))
		return &failure.OutputError{Stream: "results file " + f, Err: err}
	}
	return nil
}

// copyRootCause does what torchrun's @record does in the launcher when a worker failed: when the launcher itself
// runs with a TORCHELASTIC_ERROR_FILE (a parent that launched it under its own @record), the failing rank's record
// is written there, with "errorCode" set to the rank's exit code, so the parent reports the real root cause. A
// failing rank that wrote no record leaves the file alone, as under torchrun.
func (j *job) copyRootCause(rep *spec.Report) {
	dst := spec.LookupEnv(j.spec.Env, "TORCHELASTIC_ERROR_FILE")
	a := rep.Last()
	if dst == "" || a == nil {
		return
	}
	s := a.Failed()
	if s == nil || s.Error == nil || len(s.Error.Raw()) == 0 {
		return
	}
	var doc map[string]any
	if err := json.Unmarshal(s.Error.Raw(), &doc); err != nil {
		return
	}
	if m, ok := doc["message"].(map[string]any); ok {
		m["errorCode"] = s.ExitCode
	}
	b, err := json.Marshal(doc)
	if err == nil {
		err = os.WriteFile(dst, b, 0o644)
	}
	if err != nil {
		j.log.Warn("could not copy the failing rank's error to the launcher's TORCHELASTIC_ERROR_FILE", zap.String("file", dst), zap.Error(err))
		return
	}
	j.log.Info("failing rank's error copied to the launcher's TORCHELASTIC_ERROR_FILE", zap.Int("rank", s.Rank), zap.String("file", dst))
}

// startReaping sets up what the job's Spec leaves to Run: the signals it catches (sigs nil, unless noSignals) and
// the reaper (unless noReaper; PID 1 always reaps). It returns the run's signals, the reaper lent to the run (nil
// without one) and undoAll, which undoes both once the job is over.
func startReaping(log *zap.Logger, sigs <-chan os.Signal, noSignals, noReaper bool) (_ <-chan os.Signal, rp *proc.Reaper, undoAll func()) {
	var undo []func()
	if sigs == nil && !noSignals {
		var stopSigs func()
		sigs, stopSigs = stop.NotifySignals()
		undo = append(undo, stopSigs)
	}
	if !noReaper || os.Getpid() == 1 {
		r, release, err := proc.LendReaper(log.Named("reaper"))
		if err != nil {
			log.Warn("cannot become the child subreaper; sweeping orphans by environment", zap.Error(err))
		} else {
			rp = r
			undo = append(undo, release)
		}
	}
	return sigs, rp, func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
}
