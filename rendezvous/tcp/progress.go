package tcp

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"tpurun/rendezvous"
	"tpurun/rendezvous/internal/agree"
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
		s.log.Info(w.progressLine() + "; " + w.waitLine())
		t.Reset(s.cfg.Progress)
	})
}

// progressLine says who has arrived in w and who is missing. With s.mu held.
func (w *world) progressLine() string {
	arrived := make([]rendezvous.Member, len(w.entries))
	names := make([]string, len(w.entries))
	for i, e := range w.entries {
		arrived[i], names[i] = e.m, e.m.Ref(e.m.Rank).String()
	}
	var missing []string
	var re *rendezvous.Error
	if errors.As(agree.Missing(w.gen, w.min, w.nnodes, arrived, w.hosts, 0), &re) {
		for _, n := range re.Nodes {
			missing = append(missing, n.String())
		}
	}
	return fmt.Sprintf("rendezvous: generation %d waits for nodes: %d of %s arrived (%s); missing: %s",
		w.gen, len(w.entries), agree.SizeRange(w.min, w.nnodes), progress.List(names, maxNamed), progress.List(missing, maxNamed))
}

// waitLine says how long w's join still waits: until its timeout, or the end of its last call. With s.mu held.
func (w *world) waitLine() string {
	if !w.lastCallEnd.IsZero() {
		return fmt.Sprintf("the last call ends in %s", progress.Left(w.lastCallEnd))
	}
	return fmt.Sprintf("the join times out in %s", progress.Left(w.deadline))
}

// progressKey is the key of the line a waiting request answers while its node's join is under way (message.Extra):
// the server's progress line of the forming world.
const progressKey = "progress"

// progressFresh is how long a progress line answers the waiting requests: every node of a world asks once per
// progress interval, and a line is made from every node arrived, so a line made per request made the server's
// work the square of the world (16,384 nodes: minutes of the server's CPU, and the joins unanswered).
const progressFresh = time.Second

// formingProgress is the answer to a waiting request of a node whose join is under way: w's progress line, made
// at most once per progressFresh. Takes s.mu.
func (s *Server) formingProgress(w *world) *message {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.complete || w.ended {
		return &message{}
	}
	if now := time.Now(); w.progress == "" || now.Sub(w.progressAt) >= progressFresh {
		w.progress, w.progressAt = w.progressLine(), now
	}
	return &message{Extra: map[string]string{progressKey: w.progress}}
}

// joinProgress logs, every progress interval until stop, that this node waits for the world at the endpoint: once
// it reached the server (joined holds its connection), the server's line of who has arrived and who is missing,
// asked for with a waiting request; before, that it has not reached it; and how long it will still wait. The node
// hosting the server says nothing here: the server's own lines say it.
func (t *Store) joinProgress(gen int, deadline time.Time, joined *atomic.Pointer[client], log *zap.Logger) (stop func()) {
	if t.server != nil {
		return func() {}
	}
	every := progress.Interval(t.cfg.Conf)
	return progress.Every(every, func() {
		wait := fmt.Sprintf("the join times out in %s", progress.Left(deadline))
		c := joined.Load()
		if c == nil {
			g := "the latest generation"
			if gen >= 0 {
				g = fmt.Sprintf("generation %d", gen)
			}
			log.Info(fmt.Sprintf("rendezvous: waiting to join %s at %s: this node has not reached the rendezvous server yet (node 0, or the endpoint's host, hosts it); %s",
				g, t.endpoint, wait))
			return
		}
		line := fmt.Sprintf("rendezvous: joined at %s, waiting for the other nodes", t.endpoint)
		if r, err := c.call(context.Background(), &message{Type: msgWaiting}, min(every, time.Second)); err == nil && r.Extra[progressKey] != "" {
			line = r.Extra[progressKey] + " (as node 0's server sees it)"
		}
		log.Info(line + "; " + wait)
	})
}
