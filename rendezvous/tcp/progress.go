package tcp

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"tpurun/rendezvous"
	"tpurun/rendezvous/internal/progress"
)

// A node waiting for the others says so every progress interval (ServerConfig.Progress, the option
// progress_interval), one line at a time: the server (on the node hosting it) names who has arrived, who is
// missing and how long the join still waits; a node joining through another's server says whether it reached it
// and how long it will still wait.

// maxNamed bounds how many nodes a progress line names.
const maxNamed = 16

// watchForming logs w's progress every s.cfg.Progress until it is complete, fails, is left by every joiner or
// the server closes. Started by the first joiner, with s.mu held.
func (s *Server) watchForming(w *world) {
	var t *time.Timer
	t = time.AfterFunc(s.cfg.Progress, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed || w.ended || w.complete || s.worlds[w.gen] != w || len(w.entries) == 0 {
			return
		}
		s.log.Info(w.progressLine())
		t.Reset(s.cfg.Progress)
	})
}

// progressLine says who has arrived in w, who is missing and how long the join still waits. With s.mu held.
func (w *world) progressLine() string {
	arrived := make([]rendezvous.Member, len(w.entries))
	names := make([]string, len(w.entries))
	for i, e := range w.entries {
		arrived[i], names[i] = e.m, e.m.Ref(e.m.Rank).String()
	}
	var missing []string
	var re *rendezvous.Error
	if errors.As(rendezvous.Missing(w.gen, w.min, w.nnodes, arrived, w.hosts, 0), &re) {
		for _, n := range re.Nodes {
			missing = append(missing, n.String())
		}
	}
	wait := fmt.Sprintf("the join times out in %s", progress.Left(w.deadline))
	if !w.lastCallEnd.IsZero() {
		wait = fmt.Sprintf("the last call ends in %s", progress.Left(w.lastCallEnd))
	}
	return fmt.Sprintf("rendezvous: generation %d waits for nodes: %d of %s arrived (%s); missing: %s; %s",
		w.gen, len(w.entries), rendezvous.SizeRange(w.min, w.nnodes), progress.List(names, maxNamed), progress.List(missing, maxNamed), wait)
}

// joinProgress logs, every progress interval until stop, that this node waits for the world at the endpoint:
// whether it has reached the server (reached), and how long it will still wait. The node hosting the server says
// nothing here: the server's own lines say more.
func (t *Store) joinProgress(gen int, deadline time.Time, reached *atomic.Bool, log *zap.Logger) (stop func()) {
	if t.server != nil {
		return func() {}
	}
	return progress.Every(progress.Interval(t.cfg.Conf), func() {
		what := "has not reached the rendezvous server yet (node 0, or the endpoint's host, hosts it)"
		if reached.Load() {
			what = "has joined; node 0's server waits for the other nodes (its log names who is missing)"
		}
		g := "the latest generation"
		if gen >= 0 {
			g = fmt.Sprintf("generation %d", gen)
		}
		log.Info(fmt.Sprintf("rendezvous: waiting to join %s at %s: this node %s; the join times out in %s", g, t.endpoint, what, progress.Left(deadline)))
	})
}
