package tcp

import (
	"cmp"
	"errors"
	"fmt"
	"time"
	"tpurun/rendezvous/internal/agree"

	"go.uber.org/zap"

	"tpurun/internal/failure"
	"tpurun/rendezvous"
)

// progress completes the world when it has nnodes members, and opens (or cancels) the last call of an elastic
// world as it reaches (or falls below) min members. Called with s.mu held.
func (s *Server) progress(w *world) {
	if w.complete {
		return
	}
	n := len(w.entries)
	switch {
	case n >= w.nnodes:
		w.stopLastCall()
		w.finish()
	case n >= w.min && w.lastCallEnd.IsZero():
		end := time.Now().Add(w.lastCall)
		w.lastCallEnd = end
		w.lastCallTimer = time.AfterFunc(w.lastCall, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if !w.complete && w.joinErr == nil && w.lastCallEnd.Equal(end) && len(w.entries) >= w.min {
				s.log.Info("rendezvous last call over", zap.Int("generation", w.gen), zap.Int("nodes", len(w.entries)))
				w.lastCallTimer = nil
				w.finish()
			}
		})
	case n < w.min && !w.lastCallEnd.IsZero():
		w.stopLastCall()
	}
}

// waiting is the number of nodes waiting in generation gen+1 for the world to restart. Takes s.mu.
func (s *Server) waiting(gen int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.worlds[gen+1]; w != nil && !w.complete {
		return len(w.entries)
	}
	return 0
}

// joinReq is a join as the server reads it.
type joinReq struct {
	mem      rendezvous.Member
	nnodes   int
	min      int
	lastCall time.Duration
	hostsSum string
	timeout  time.Duration
}

func (r *joinReq) size() string { return agree.SizeRange(r.min, r.nnodes) }

// join enters c's node into a generation and answers with its share of the agreed world, or why there is none.
func (s *Server) join(c *sconn, m *message) {
	r := &joinReq{mem: *m.Member, nnodes: m.NNodes, min: cmp.Or(m.MinNodes, m.NNodes), lastCall: rendezvous.DefaultLastCall,
		hostsSum: m.HostsSum, timeout: s.timeout(m)}
	if m.LastCallMS > 0 {
		r.lastCall = time.Duration(m.LastCallMS) * time.Millisecond
	}
	c.joining.Add(1) // the world forms: the node is waited for, within its timeout (awaitWorld)
	defer c.joining.Add(-1)
	w, e, err := s.enter(c, r)
	if err != nil {
		if !errors.Is(err, rendezvous.ErrJobClosed) {
			s.log.Warn("rendezvous join refused", zap.Error(err))
		}
		s.reply(c, m.ID, nil, err)
		return
	}
	sh, rank, err := s.awaitWorld(c, w, e, min(r.timeout, time.Until(w.deadline)))
	switch {
	case errors.Is(err, rendezvous.ErrClosed):
		// the connection or the server is gone: nobody to answer
	case err != nil:
		s.reply(c, m.ID, nil, err)
	default:
		s.sendShare(c, m.ID, sh, rank)
	}
}

// enter places r's node in its generation's world. A second join by the same instance takes its entry over (its
// old connection is closed without the node being reported lost).
func (s *Server) enter(c *sconn, r *joinReq) (*world, *entry, error) {
	s.mu.Lock()
	if c.ent != nil {
		s.mu.Unlock()
		return nil, nil, agree.NewError(rendezvous.ErrProtocol, "a second join on one connection; open a new connection per generation")
	}
	if err := s.straggler(&r.mem); err != nil {
		s.mu.Unlock()
		return nil, nil, err
	}
	if s.ended != nil {
		s.mu.Unlock()
		return nil, nil, s.ended
	}
	if r.mem.Generation == rendezvous.LatestGeneration {
		if err := s.latestFor(r); err != nil {
			s.mu.Unlock()
			return nil, nil, err
		}
	}
	w, err := s.worldFor(r)
	if err != nil {
		s.mu.Unlock()
		return nil, nil, err
	}
	e, old, err := w.claim(c, r.mem)
	if err != nil {
		s.mu.Unlock()
		return nil, nil, err
	}
	if r.hostsSum != w.hostsSum {
		w.mixed = true // nodes name different host lists: every share names its nodes itself
	}
	c.w, c.ent = w, e
	if w.deadline.IsZero() {
		w.started, w.deadline = time.Now(), time.Now().Add(r.timeout)
		s.watchForming(w)
	}
	s.progress(w)
	if old != nil && old != c {
		old.ent = nil
	}
	s.mu.Unlock()
	if old != nil && old != c {
		old.nc.Close()
	}
	return w, e, nil
}

// latestFor places a LatestGeneration joiner: in the latest generation while it forms, else in the next one,
// where it waits for the world to restart (a late or returning node). A joiner asking for another size range than
// the running world's is refused at once. With s.mu held.
func (s *Server) latestFor(r *joinReq) error {
	r.mem.Generation = s.latest
	w := s.worlds[s.latest]
	if w == nil || !w.complete {
		return nil
	}
	if err := w.sameSize(r); err != nil {
		return err
	}
	r.mem.Generation++
	s.log.Info("rendezvous: a node waits for the world to restart", zap.String("host", r.mem.Host), zap.String("instance", r.mem.Instance),
		zap.Int("running_generation", w.gen), zap.Int("waits_in_generation", r.mem.Generation))
	return nil
}

// worldFor is the world of r's generation: a new one made with r's size range when there is none, or when the
// last one was left by every joiner before it completed (its timeout starts again). A joiner that asks for
// another size range fails the join of every node of a forming world at once, naming both sizes and who gave
// them. With s.mu held.
func (s *Server) worldFor(r *joinReq) (*world, error) {
	g := r.mem.Generation
	w := s.worlds[g]
	if w == nil || (!w.complete && len(w.entries) == 0) {
		w = newWorld(g, r, s.cfg.Hosts, s.hostsSum)
		s.worlds[g] = w
		s.latest = max(s.latest, g)
		return w, nil
	}
	if err := w.sameSize(r); err != nil {
		w.failJoin(err)
		return nil, err
	}
	return w, nil
}

// sameSize is nil when r asks for w's size range, else the *MismatchError naming both and the nodes that gave
// them. With s.mu held.
func (w *world) sameSize(r *joinReq) error {
	if w.nnodes == r.nnodes && w.min == r.min {
		return nil
	}
	var refs []rendezvous.NodeRef
	var vals []string
	for _, e := range w.entries {
		rank := e.rank
		if !w.complete {
			rank = e.m.Rank // none assigned yet: the one it asked for, if any
		}
		if !e.lost && !e.left {
			refs, vals = append(refs, e.m.Ref(rank)), append(vals, agree.SizeRange(w.min, w.nnodes))
		}
	}
	refs, vals = append(refs, r.mem.Ref(r.mem.Rank)), append(vals, r.size())
	if len(refs) == 1 { // nobody left to name for the world's size
		return agree.NewError(rendezvous.ErrMismatch, fmt.Sprintf("generation %d is a world of %s nodes, but this node asks for %s; give every node the same node count",
			w.gen, agree.SizeRange(w.min, w.nnodes), r.size()), r.mem.Ref(r.mem.Rank))
	}
	return agree.Disagreement(failure.RendezvousNodes.Word(), w.gen, vals, refs)
}

// claim enters mem into w: the same instance again takes its entry over (old is the connection it had); another
// instance claiming the host or node rank of a live node is a duplicate, which fails the join of every node of a
// forming world at once; a complete world has no room for anyone else. With s.mu held.
func (w *world) claim(c *sconn, mem rendezvous.Member) (e *entry, old *sconn, err error) {
	if x := w.byInstance[mem.Instance]; x != nil { // the same launcher again: idempotent
		old, x.conn = x.conn, c
		if !w.complete {
			w.unindex(x)
			x.m = mem
			w.index(x)
		}
		return x, old, nil
	}
	if err := w.duplicate(mem); err != nil {
		// Two launchers claim one node: the world cannot be right, so every joiner fails now naming both
		// claimants, rather than waiting out the timeout for a node that "never arrived".
		w.failJoin(err)
		return nil, nil, err
	}
	if w.complete {
		return nil, nil, agree.NewError(rendezvous.ErrWorldFull, fmt.Sprintf("generation %d already has its %d nodes; restart every node together, or join the latest generation to wait for the next", mem.Generation, len(w.byRank)), mem.Ref(-1))
	}
	e = &entry{m: mem, conn: c, rank: -1}
	w.add(e)
	return e, nil, nil
}

// duplicate is the ErrDuplicateNode error when a live node of w holds mem's host or requested rank. With s.mu held.
func (w *world) duplicate(mem rendezvous.Member) error {
	what := "host"
	x := w.byHost[mem.Host]
	if mem.Host == "" || !w.live(x) {
		what, x = "node rank", nil
		if mem.Rank >= 0 {
			x = w.byAsked[mem.Rank]
			if w.complete && mem.Rank < len(w.byRank) && !w.live(x) {
				x = w.byRank[mem.Rank]
			}
		}
	}
	if !w.live(x) {
		return nil
	}
	claimed := x.rank
	if !w.complete {
		claimed = x.m.Rank // no rank assigned yet: the one it asked for, if any
	}
	return agree.NewError(rendezvous.ErrDuplicateNode, fmt.Sprintf("generation %d: the %s is already claimed by a live node; each node must have its own host name and node rank (check TPU_WORKER_ID, the node rank and host name each node is given, and that tpurun runs once per host)", mem.Generation, what),
		mem.Ref(mem.Rank), x.m.Ref(claimed))
}

// awaitWorld waits until e's world is agreed (e's rank, and the shares), fails (the error every joiner gets), or
// times out: then an elastic world with enough nodes completes with those present, and any other fails naming
// the nodes that never arrived. ErrClosed when the connection or the server ends first.
func (s *Server) awaitWorld(c *sconn, w *world, e *entry, timeout time.Duration) (*agree.Shares, int, error) {
	ok, err := s.wait(c, w.formed, timeout)
	if err != nil {
		return nil, 0, err
	}
	s.mu.Lock()
	if !ok && !w.ended {
		if w.joinErr == nil && len(w.entries) >= w.min {
			w.stopLastCall() // the join timeout ends an elastic join that has enough nodes
			w.finish()
		} else {
			w.failJoin(w.missing(time.Since(w.started)))
		}
	}
	jerr := w.joinErr
	if jerr == nil {
		jerr = w.err
	}
	if jerr == nil {
		c.rank = e.rank
	}
	rank, sh := e.rank, w.shares
	s.mu.Unlock()
	if jerr != nil {
		if !errors.Is(jerr, rendezvous.ErrJobClosed) {
			s.log.Warn("rendezvous join failed", zap.Error(jerr))
		}
		return nil, 0, jerr
	}
	return sh, rank, nil
}
