package tcp

import (
	"fmt"
	"time"
	"tpurun/rendezvous/internal/agree"

	"go.uber.org/zap"

	"tpurun/rendezvous"
)

// failed spreads the failure node rank reported (msgFail) to the rest of its world.
func (s *Server) failed(c *sconn, w *world, e *entry, rank int, m *message) {
	if m.Failure == nil {
		s.reply(c, m.ID, nil, agree.NewError(rendezvous.ErrProtocol, "fail message without a failure"))
		return
	}
	f := *m.Failure
	f.Node = e.m.Ref(rank)
	f.Lost = false
	s.spread(w, c, f)
	s.reply(c, m.ID, nil, nil)
}

// left records that node rank left its world on purpose (msgLeave): it is gone, not lost.
func (s *Server) left(c *sconn, w *world, e *entry, rank int, m *message) {
	s.mu.Lock()
	if !e.left && !e.lost {
		e.left = true
		w.nodeGone(e)
	}
	s.mu.Unlock()
	s.log.Debug("node left", zap.Int("node_rank", rank), zap.String("host", e.m.Host))
	s.reply(c, m.ID, nil, nil)
}

// spread records f and pushes it to every other connection of the world (encoded once).
func (s *Server) spread(w *world, from *sconn, f rendezvous.Failure) {
	frame, err := encodeFrame(&message{Type: msgFailure, Failure: &f}, s.cfg.MaxMessage)
	s.mu.Lock()
	w.failures = append(w.failures, f)
	var to []*sconn
	for _, e := range w.entries {
		if e.conn != nil && e.conn != from && !e.left {
			to = append(to, e.conn)
		}
	}
	s.mu.Unlock()
	s.log.Info("rendezvous failure spread", zap.Stringer("failure", f), zap.Int("to", len(to)))
	if err != nil {
		s.log.Error("rendezvous failure not spread", zap.Error(err))
		return
	}
	for _, c := range to {
		s.write(c, msgFailure, frame)
	}
}

// dropped handles a connection that ended: a node of a complete world that did not leave is lost.
func (s *Server) dropped(c *sconn) {
	s.mu.Lock()
	delete(s.conns, c)
	close(s.changed)
	s.changed = make(chan struct{})
	w, e := c.w, c.ent
	if w == nil || e == nil || e.conn != c {
		s.mu.Unlock()
		return
	}
	e.conn = nil
	if !w.complete {
		w.remove(e)
		s.progress(w)
		s.mu.Unlock()
		return
	}
	if e.left || e.lost {
		s.mu.Unlock()
		return
	}
	e.lost = true
	w.nodeGone(e)
	s.mu.Unlock()
	f := rendezvous.Failure{Node: e.m.Ref(e.rank), WorkerRank: -1, Lost: true, At: time.Now(),
		Reason: fmt.Sprintf("its connection to the rendezvous server dropped or stayed silent for %s (launcher killed or host down)", rendezvous.SilenceLimit(s.cfg.Heartbeat))}
	s.spread(w, nil, f)
}

// nodeGone records that e (a node of the complete world) is lost or left, and fails every barrier and gather
// still waiting for it. With s.mu held.
func (w *world) nodeGone(e *entry) {
	w.gone = append(w.gone, e.rank)
	for name, b := range w.barriers {
		if !b.over && !b.arrived[e.rank] {
			b.end(w.lostErr(e.rank, fmt.Sprintf("barrier %q cannot complete without it", name)))
		}
	}
	for key, g := range w.data {
		if _, ok := g.data[e.rank]; !ok && !g.over {
			g.end(w.lostErr(e.rank, fmt.Sprintf("gather %q cannot complete: it is gone without publishing", key)))
		}
	}
}

func (w *world) lostErr(rank int, detail string) error {
	return &rendezvous.NodeLostError{Node: w.byRank[rank].m.Ref(rank), Generation: w.gen, Detail: detail}
}
