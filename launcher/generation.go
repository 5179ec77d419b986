package launcher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"tpurun/launcher/results"
	"tpurun/launcher/topology"
	"tpurun/rendezvous"
)

// exitBarrierTimeout bounds the exchange of outcomes after the local workers are gone: a node that vanished
// without a word cannot hold the others for longer (the backends also report it lost after a heartbeat).
const exitBarrierTimeout = 5 * time.Minute

// generation runs generation g of the world (rendezvous.LatestGeneration: the one being formed): join, plan,
// barrier, one attempt of the local workers, collect, agree on the outcome. next is the generation every node
// joins when the world failed or lost a node and may restart (restarts left, at least the minimum of nodes, no
// terminating signal, no timeout), and -1 when the job is over with err.
func (j *job) generation(ctx context.Context, rz rendezvousBackend, g int, rep *Report) (next int, err error) {
	s, err := j.join(ctx, rz, g)
	if err != nil {
		return -1, err
	}
	defer func() { _ = s.Close() }()
	a := s.Assignment()
	g = a.Generation // the world's count of restarts, whatever this node joined as
	plan, nodeRank, masterAddr, masterPort := j.plan, j.nodeRank, j.spec.MasterAddr, j.spec.MasterPort
	if !j.spec.Rendezvous.Solo() {
		j.log.Info("rendezvous agreed", zap.Int("generation", g), zap.Int("node_rank", a.NodeRank), zap.Int("nnodes", len(a.Nodes)),
			zap.Int("world_size", a.WorldSize), zap.String("master", net.JoinHostPort(a.MasterAddr, strconv.Itoa(a.MasterPort()))))
		if plan, err = j.worldPlan(a); err != nil {
			_ = s.Fail(ctx, rendezvous.Failure{WorkerRank: -1, Reason: "planning failed: " + err.Error()})
			return -1, err
		}
		nodeRank, masterAddr, masterPort = a.NodeRank, a.MasterAddr, a.MasterPort()
		if err := s.Barrier(ctx, "start"); err != nil {
			return j.lost(ctx, g, rendezvousErr("barrier before the start", err))
		}
	}

	// Another node's failure stops this node's attempt; this node's first failure is told to the others at once.
	rctx, cancel := context.WithCancelCause(ctx)
	var bg sync.WaitGroup
	defer func() { // closing the session ends its Failures: the reader below returns
		cancel(nil)
		_ = s.Close()
		bg.Wait()
	}()
	bg.Go(func() {
		first := true
		for f := range s.Failures() {
			if first {
				j.log.Error("stopping: another node failed", zap.Stringer("failure", f))
				cancel(&remoteStop{f: f})
				first = false
			}
		}
	})
	coll := j.newCollector(plan, nodeRank)
	att, runErr := j.attempt(rctx, attemptSpec{n: g, plan: plan, nodeRank: nodeRank, masterAddr: masterAddr,
		masterPort: masterPort, sink: coll, onFailure: func(we *WorkerError) {
			bg.Go(func() {
				if err := s.Fail(ctx, rendezvous.Failure{WorkerRank: we.Rank, Reason: we.Error()}); err != nil {
					j.log.Warn("could not tell the other nodes", zap.Error(err))
				}
			})
		}})
	rep.Attempts = append(rep.Attempts, att)
	j.obs.emit(Event{Kind: AttemptEnded, Attempt: g, Ended: att, Report: rep}) // att is nil when none started

	mine := outcome{Node: a.NodeRank, Code: ExitCode(runErr), Origin: runErr != nil, Rank: -1}
	var rs *remoteStop
	if errors.As(context.Cause(rctx), &rs) && errors.Is(runErr, context.Canceled) {
		mine.Origin, mine.Error = false, rs.Error()
		runErr = rs
	} else if runErr != nil {
		mine.Error = runErr.Error()
	}
	var we *WorkerError
	if errors.As(runErr, &we) {
		mine.Rank = we.Rank
	}
	if a.NodeRank != 0 && att != nil {
		mine.WantDocument = j.spec.Results.Document || j.spec.Results.File != ""
		mine.Results = coll.Share()
		for _, r := range att.Ranks {
			mine.Exits = append(mine.Exits, rankEnd{Rank: r.Rank, PID: r.PID, ExitCode: r.ExitCode, Signal: int(r.Signal)})
		}
	}
	gctx, gcancel := context.WithTimeout(ctx, exitBarrierTimeout)
	defer gcancel()
	all, gerr := publishGather(gctx, s, "outcome", mine, len(a.Nodes))
	if gerr != nil {
		return j.lost(ctx, g, noVerdict(mine, runErr, gerr))
	}
	v, failed := verdict(all)
	// Node 0 merges every node's results and exits into its report, checks exactly-once world-wide, writes the
	// results document, and shares the final code, which every node then exits with.
	final := outcome{Node: a.NodeRank, Code: v.Code, Error: v.Error, Rank: v.Rank}
	var finalErr error
	if a.NodeRank == 0 && att != nil {
		exits := att.ResultExits()
		for _, oc := range all[1:] {
			if err := coll.Add(oc.Node, oc.Results); err != nil {
				j.log.Error("results of another node break the contract", zap.Int("node", oc.Node), zap.Error(err))
			}
			for _, e := range oc.Exits {
				exits = append(exits, RankSummary{Rank: e.Rank, PID: e.PID, ExitCode: e.ExitCode, Signal: syscall.Signal(e.Signal)}.resultExit())
			}
		}
		var worldErr error
		switch {
		case failed && v.Node == 0:
			worldErr = runErr
		case failed:
			worldErr = &NodeError{Node: v.Node, Code: v.Code, Message: v.Error}
		}
		rep.Results, finalErr = j.finishResults(exits, coll, worldErr)
		final.Code = ExitCode(finalErr)
		if final.Code != 0 && !failed {
			final.Error = "the results of the world break the contract (see node 0): " + finalErr.Error()
		}
		for _, oc := range all[1:] {
			if oc.WantDocument {
				final.Document = rep.Results
				break
			}
		}
	}
	finals, gerr := publishGather(gctx, s, "final", final, len(a.Nodes))
	if gerr != nil {
		return j.lost(ctx, g, noVerdict(mine, runErr, gerr))
	}
	final = finals[0]
	_ = s.Leave(ctx)
	var docErr error
	if a.NodeRank != 0 && mine.WantDocument && final.Document != nil {
		rep.Results, docErr = final.Document, j.writeResultsFile(final.Document)
	}

	switch {
	case final.Code == 0 && docErr != nil:
		return -1, docErr
	case final.Code == 0:
		return -1, nil
	case a.NodeRank == 0 && finalErr != nil:
		err = finalErr
	case failed && v.Node == a.NodeRank && runErr != nil:
		err = runErr
	default:
		err = &NodeError{Node: v.Node, Code: final.Code, Message: final.Error}
	}
	if failed && g < j.spec.MaxRestarts && j.restartable(ctx, att, err) {
		j.logRestart(g, v.Node, final.Code, err)
		return g + 1, nil
	}
	if failed && g < j.spec.MaxRestarts && ctx.Err() != nil {
		return -1, ctx.Err() // canceled while a restart was still possible: the caller's cancellation ends it
	}
	return -1, err
}

// logRestart says that generation g failed (node's worker, code) and the next one starts: in a world's words, or
// on one host in its own (no world, node or generation to speak of).
func (j *job) logRestart(g, node, code int, err error) {
	if j.spec.Rendezvous.Solo() {
		j.log.Warn("a worker failed: restarting the workers", zap.Int("failed_attempt", g), zap.Int("next_attempt", g+1),
			zap.Int("max_restarts", j.spec.MaxRestarts), zap.Int("code", code), zap.Error(err))
		return
	}
	j.log.Warn("the world failed: restarting every node as the next generation", zap.Int("failed_generation", g),
		zap.Int("next_generation", g+1), zap.Int("max_restarts", j.spec.MaxRestarts), zap.Int("failed_node", node),
		zap.Int("code", code), zap.Error(err))
}

// lost decides what a node does when generation g could not agree because a node of the world is gone: with
// restarts left (and no signal, timeout or cancellation) the survivors join generation g+1 — the join completes
// with at least the minimum of nodes, or fails naming who is missing; otherwise the job ends with err.
func (j *job) lost(ctx context.Context, g int, err error) (int, error) {
	if !errors.Is(err, rendezvous.ErrNodeLost) || g >= j.spec.MaxRestarts || !j.restartable(ctx, nil, err) {
		return -1, err
	}
	j.log.Warn("a node of the world was lost: the survivors restart as the next generation", zap.Int("lost_generation", g),
		zap.Int("next_generation", g+1), zap.Int("max_restarts", j.spec.MaxRestarts), zap.Error(err))
	return g + 1, nil
}

// restartable reports whether the job may start another generation after att failed with err: not after a
// terminating signal, the timeout, or the caller's cancellation.
func (j *job) restartable(ctx context.Context, att *Attempt, err error) bool {
	if ctx.Err() != nil {
		j.log.Warn("not restarting: the job was canceled", zap.Error(ctx.Err()))
		return false
	}
	if att != nil && (att.Reason == StopSignal || att.Reason == StopTimeout) {
		return false
	}
	if j.stopRequested() {
		j.log.Warn("not restarting: received " + SignalName(j.stopSignal))
		return false
	}
	if j.timedOut() {
		j.log.Warn("not restarting: the timeout expired", zap.Duration("timeout", j.spec.Timeout))
		return false
	}
	if errors.Is(err, ErrTimeout) {
		return false
	}
	return true
}

// join enters generation g; a terminating signal during the join ends the job with 128+N.
func (j *job) join(ctx context.Context, rz rendezvousBackend, g int) (session, error) {
	m, err := j.member(rz, g)
	if err != nil {
		return nil, err
	}
	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if !j.spec.Rendezvous.Solo() {
		wg.Go(func() {
			for {
				select {
				case sig := <-j.spec.Signals:
					if s, ok := sig.(syscall.Signal); ok && terminating(s) {
						j.stopSignal = s
						cancel(&SignalError{Signal: s, During: "the rendezvous join"})
						return
					}
				case <-j.timeout:
					j.expired = true
					cancel(fmt.Errorf("%w: the timeout %s expired during the rendezvous join", ErrTimeout, j.spec.Timeout))
					return
				case <-stop:
					return
				}
			}
		})
	}
	start := time.Now()
	s, err := rz.Join(jctx, m)
	close(stop)
	wg.Wait()
	if err != nil {
		if cause := context.Cause(jctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return nil, cause
		}
		return nil, rendezvousErr(fmt.Sprintf("join of generation %d (run %s, %s backend)", g, j.spec.RunID, j.spec.Rendezvous.Backend), err)
	}
	j.obs.emit(Event{Kind: RendezvousDone, Attempt: g, Rendezvous: time.Since(start)})
	return s, nil
}

// worldPlan is the plan of the agreed world a, checked for busy ports on this node.
func (j *job) worldPlan(a *rendezvous.Assignment) (*topology.Plan, error) {
	w := topology.World{NodeRank: a.NodeRank, NumSlices: a.NumSlices, MegascaleCoordinator: a.MegascaleCoordinator,
		MegascalePort: a.Ports[rendezvous.PortMegascale]}
	for _, n := range a.Nodes {
		w.Nodes = append(w.Nodes, topology.WorldNode{Host: n.Host, Addr: n.Addr, LocalWorkers: n.LocalWorkers, SliceID: n.SliceID, Role: n.Role})
	}
	var p *topology.Plan
	var err error
	if j.host == nil { // a ready plan (Spec.Plan): its host split, spread over the agreed world
		p, err = spreadPlan(j.plan, j.nodeRank, w)
	} else if p, err = topology.WorldPlan(j.host, j.request, w); err == nil {
		err = p.CheckPorts(a.NodeRank, j.host.ProcRoot, nil)
	}
	if err != nil {
		return nil, err
	}
	if port := a.Ports[rendezvous.PortCoordinator]; port != 0 { // node 0's pick, shared by every node
		p.SetJAXCoordinator(net.JoinHostPort(a.MasterAddr, strconv.Itoa(port)))
	}
	return p, nil
}

// spreadPlan gives every node of w the split of node nodeRank of a ready plan, with consecutive global ranks.
func spreadPlan(p *topology.Plan, nodeRank int, w topology.World) (*topology.Plan, error) {
	local := p.Local(nodeRank)
	out := &topology.Plan{Device: p.Device}
	rank := 0
	for n, node := range w.Nodes {
		out.Nodes = append(out.Nodes, topology.Node{Rank: n, Host: node.Addr, LocalWorkers: node.LocalWorkers})
		for lr := 0; lr < node.LocalWorkers; lr++ {
			env := map[string]string{}
			if lr < len(local) {
				for k, v := range local[lr].Env {
					env[k] = v
				}
			}
			out.Workers = append(out.Workers, topology.Worker{Rank: rank, LocalRank: lr, NodeRank: n, Replicas: []int{rank}, Env: env})
			rank++
		}
	}
	return out, nil
}

// noVerdict is the error of a node that could not learn the world's verdict: its own failure if it had one,
// else a rendezvous failure.
func noVerdict(mine outcome, runErr, gerr error) error {
	if mine.Origin && runErr != nil {
		return runErr
	}
	return fmt.Errorf("%w: no world-wide verdict: %w", ErrRendezvous, gerr)
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
		OnResult:      func() { j.obs.emit(Event{Kind: ResultReceived}) },
	})
}
