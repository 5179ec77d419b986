package job

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/attempt"
	"tpurun/internal/failure"
	"tpurun/internal/host"
	"tpurun/internal/results"
	"tpurun/internal/spec"
	"tpurun/internal/stop"
	"tpurun/rendezvous"
)

// exitBarrierTimeout bounds the exchange of outcomes after the local workers are gone: a node that vanished
// without a word cannot hold the others for longer (the backends also report it lost after a heartbeat). A stop
// (a signal, the timeout, a lost store) ends the exchange at once.
const exitBarrierTimeout = 5 * time.Minute

// stoppedExchangeSlack is how much longer than the grace period a node that was stopped (a signal, the timeout)
// waits for the other nodes' outcome: they were told at once, and stop their workers within their grace.
const stoppedExchangeSlack = 10 * time.Second

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
	var bg sync.WaitGroup
	defer func() { // closing the session ends its Failures: the reader below returns
		_ = s.Close()
		bg.Wait()
	}()
	a := s.Assignment()
	g = a.Generation // the world's count of restarts, whatever this node joined as
	w, v := j.agree(s, a)
	if v != nil {
		return j.lost(g, v)
	}
	// Another node's failure stops this node's attempt (through the controller); this node's own stop is told to
	// the others at once.
	bg.Go(func() {
		for f := range s.Failures() {
			j.log.Warn("another node: "+f.String(), zap.Stringer("failure", f))
			j.ctl.Stop(causeOf(f))
		}
	})
	coll := j.newCollector(w.Plan, w.NodeRank)
	j.obs.Emit(spec.Event{Kind: spec.AttemptStarted, Attempt: g})
	att, seq := j.runner.Run(attempt.Spec{N: g, Plan: w.Plan, NodeRank: w.NodeRank, MasterAddr: w.MasterAddr,
		MasterPort: w.MasterPort, Results: coll, Announce: func(c *stop.Cause) {
			bg.Go(func() { j.announce(s, c) })
		}})
	rep.Attempts = append(rep.Attempts, att)
	j.obs.Emit(spec.Event{Kind: spec.AttemptEnded, Attempt: g, Ended: att, Report: rep})
	return j.conclude(s, a, att, seq, coll, rep)
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
// results and decides the code every node exits with) and says what comes next: a restart, or the end. stopSeq is
// the controller's count of job-wide causes when att ended (stop.Controller.StopSeq).
func (j *job) conclude(s rendezvous.Session, a *rendezvous.Assignment, att *attempt.Attempt, stopSeq int,
	coll *results.Collector, rep *spec.Report) (int, *stop.Verdict) {
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
	ctx, cancel := j.ctl.WaitContext(tctx, stopSeq) // not the job's context: a node that stopped still reports how
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
		if slices.ContainsFunc(all[1:], func(oc outcome) bool { return oc.WantDocument }) {
			final.Document = rep.Results
		}
	}
	finals, err := publishGather(ctx, s, "final", final, a.NNodes)
	if err != nil {
		return j.noVerdict(ctx, s, a.Generation, att, err)
	}
	next, v := j.next(a, att, mine, finals[0], jobV, failed, rep)
	// This node's part in the generation ends. When the job ends there, it is first closed with the world's code,
	// so that a node waiting for a next generation, or arriving late, learns that the job is over.
	if next < 0 {
		if err := s.Finish(ctx, finals[0].Verdict.Code); err != nil {
			j.log.Warn("could not record that the job closed", zap.Int("generation", a.Generation), zap.Error(err))
		}
	}
	_ = s.Leave(ctx)
	return next, v
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
	var v *stop.Verdict
	if c := stop.CauseOf(ctx); c != nil {
		j.log.Warn(c.String() + " while waiting for the other nodes' outcome: stopping the run")
		j.announce(s, c)
		v = c.VerdictDuring("the wait for the other nodes' outcome", j.spec.Timeout)
	} else {
		v = verdictOf(fmt.Errorf("%w: no world-wide verdict: %w", failure.ErrRendezvous, err))
		if next, _ := j.lost(g, v); next >= 0 {
			return next, nil
		}
	}
	if att.Verdict.Code != 0 && att.Verdict.Reason.Own() {
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
