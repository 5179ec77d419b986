package rendezvous

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
)

// world is one generation on the server: its members, and once complete, their ranks, barriers, data and
// failures. Guarded by Server.mu.
type world struct {
	gen      int
	nnodes   int // the most nodes
	min      int // the fewest nodes (nnodes unless elastic)
	lastCall time.Duration
	hosts    []string
	entries  []*entry
	complete bool
	byRank   []*entry
	asg      *Assignment
	err      error
	barriers map[string]map[int]bool
	data     map[string]map[int][]byte
	failures []Failure
	changed  chan struct{}
	// deadline ends the join phase: set by the first joiner, reset when every joiner has gone. joinErr is the
	// one error every joiner gets.
	deadline time.Time
	joinErr  error
	started  time.Time
	// lastCallEnd is set while the join has min..nnodes-1 nodes: the world completes then with those present.
	lastCallEnd   time.Time
	lastCallTimer *time.Timer
}

type entry struct {
	m    Member
	conn *sconn
	rank int
	left bool
	lost bool
}

func (w *world) notify() {
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *world) remove(e *entry) {
	for i, x := range w.entries {
		if x == e {
			w.entries = append(w.entries[:i], w.entries[i+1:]...)
			return
		}
	}
}

func (w *world) stopLastCall() {
	if w.lastCallTimer != nil {
		w.lastCallTimer.Stop()
		w.lastCallTimer = nil
	}
	w.lastCallEnd = time.Time{}
}

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
			if !w.complete && w.lastCallEnd.Equal(end) && len(w.entries) >= w.min {
				s.log.Info("rendezvous last call over", zap.Int("generation", w.gen), zap.Int("nodes", len(w.entries)))
				w.lastCallTimer = nil
				w.finish()
				w.notify()
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

func (s *Server) join(c *sconn, m *message) {
	mem := *m.Member
	minNodes := cmp.Or(m.MinNodes, m.NNodes)
	lastCall := DefaultLastCall
	if m.LastCallMS > 0 {
		lastCall = time.Duration(m.LastCallMS) * time.Millisecond
	}
	s.mu.Lock()
	if c.ent != nil {
		s.mu.Unlock()
		s.reply(c, m.ID, nil, newError(ErrProtocol, "a second join on one connection; open a new connection per generation"))
		return
	}
	if mem.Generation == LatestGeneration {
		// the open generation, or the next one when the latest is complete: a node that comes back or a new one
		// waits there for the others to restart the world
		mem.Generation = s.latest
		if w := s.worlds[s.latest]; w != nil && w.complete {
			mem.Generation++
		}
	}
	w := s.worlds[mem.Generation]
	if w == nil {
		w = &world{gen: mem.Generation, nnodes: m.NNodes, min: minNodes, lastCall: lastCall, hosts: m.Hosts,
			barriers: map[string]map[int]bool{}, data: map[string]map[int][]byte{}, changed: make(chan struct{})}
		s.worlds[mem.Generation] = w
		s.latest = max(s.latest, mem.Generation)
	} else if w.nnodes != m.NNodes || w.min != minNodes {
		s.mu.Unlock()
		s.reply(c, m.ID, nil, newError(ErrMismatch, fmt.Sprintf("generation %d is a world of %s nodes, but this node asks for %s; give every node the same node count",
			mem.Generation, sizeRange(w.min, w.nnodes), sizeRange(minNodes, m.NNodes)), mem.ref(mem.Rank)))
		return
	}
	var e *entry
	var old *sconn
	for _, x := range w.entries {
		if x.m.Instance == mem.Instance {
			e = x // the same launcher again: idempotent
			break
		}
	}
	if e != nil {
		old = e.conn
		e.conn = c
		if !w.complete {
			e.m = mem
		}
	} else {
		for _, x := range w.entries {
			live := !x.lost && !x.left && (x.conn != nil || w.complete)
			if !live {
				continue
			}
			sameHost := mem.Host != "" && x.m.Host == mem.Host
			sameRank := mem.Rank >= 0 && (x.m.Rank == mem.Rank || (w.complete && x.rank == mem.Rank))
			if sameHost || sameRank {
				what := "host"
				if !sameHost {
					what = "node rank"
				}
				claimed := x.rank
				if !w.complete {
					claimed = x.m.Rank // no rank assigned yet: the one it asked for, if any
				}
				err := newError(ErrDuplicateNode, fmt.Sprintf("generation %d: the %s is already claimed by a live node; each node must have its own host name and node rank (check TPU_WORKER_ID, the node rank and host name each node is given, and that tpurun runs once per host)", mem.Generation, what),
					mem.ref(mem.Rank), x.m.ref(claimed))
				if !w.complete && w.joinErr == nil {
					// Two launchers claim one node: the world cannot be right, so every joiner fails now naming
					// both claimants, rather than waiting out the timeout for a node that "never arrived".
					w.joinErr = err
					w.notify()
				}
				s.mu.Unlock()
				s.log.Warn("rendezvous join refused", zap.Error(err))
				s.reply(c, m.ID, nil, err)
				return
			}
		}
		if w.complete {
			s.mu.Unlock()
			s.reply(c, m.ID, nil, newError(ErrWorldFull, fmt.Sprintf("generation %d already has its %d nodes; restart every node together, or join the latest generation to wait for the next", mem.Generation, len(w.byRank)), mem.ref(-1)))
			return
		}
		e = &entry{m: mem, conn: c, rank: -1}
		w.entries = append(w.entries, e)
	}
	c.w, c.ent = w, e
	if len(w.entries) == 1 && !w.complete && (w.deadline.IsZero() || w.joinErr != nil) {
		w.started, w.deadline, w.joinErr = time.Now(), time.Now().Add(s.timeout(m)), nil
	}
	s.progress(w)
	w.notify()
	s.mu.Unlock()
	if old != nil && old != c {
		s.mu.Lock()
		old.ent = nil
		s.mu.Unlock()
		old.nc.Close()
	}
	timeout := min(s.timeout(m), time.Until(w.deadline))
	var asg *Assignment
	var jerr error
	result := func() bool { // with s.mu held
		if w.joinErr != nil {
			jerr = w.joinErr
			return true
		}
		if !w.complete {
			return false
		}
		if w.err != nil {
			jerr = w.err
			return true
		}
		a := *w.asg
		a.NodeRank = e.rank
		c.rank = e.rank
		asg = &a
		return true
	}
	ok, err := s.await(c, w, timeout, result)
	if err != nil {
		return
	}
	if !ok {
		s.mu.Lock()
		if !w.complete && w.joinErr == nil && len(w.entries) >= w.min {
			w.stopLastCall() // the join timeout ends an elastic join that has enough nodes
			w.finish()
			w.notify()
		}
		if !result() {
			w.joinErr = w.missing(time.Since(w.started))
			w.notify()
			jerr = w.joinErr
		}
		s.mu.Unlock()
		if jerr != nil {
			s.log.Warn("rendezvous join failed", zap.Error(jerr))
		}
	}
	s.reply(c, m.ID, &message{Assignment: asg}, jerr)
}

// missing names the nodes that have not arrived: of an elastic world, those below its minimum.
func (w *world) missing(waited time.Duration) error {
	claimed := map[int]bool{}
	var arrived []string
	anyRank := 0
	for _, e := range w.entries {
		if e.m.Rank >= 0 {
			claimed[e.m.Rank] = true
		} else {
			anyRank++
		}
		arrived = append(arrived, e.m.ref(e.m.Rank).String())
	}
	var nodes []NodeRef
	for r := 0; r < w.min; r++ {
		if claimed[r] {
			continue
		}
		if anyRank > 0 {
			anyRank--
			continue
		}
		n := NodeRef{Rank: r}
		if r < len(w.hosts) {
			n.Host = w.hosts[r]
		}
		nodes = append(nodes, n)
	}
	return newError(ErrMissingNodes, fmt.Sprintf("generation %d: %d of %s nodes arrived within %s (arrived: %s); start tpurun on the missing nodes or raise the join timeout",
		w.gen, len(w.entries), sizeRange(w.min, w.nnodes), waited.Round(time.Millisecond), strings.Join(arrived, ", ")), nodes...)
}

// finish assigns ranks and checks agreement; called when the join is over with min..nnodes nodes present.
func (w *world) finish() {
	w.complete = true
	n := len(w.entries)
	members := make([]Member, n)
	for i, e := range w.entries {
		members[i] = e.m
	}
	ranks, err := assignRanks(members, n)
	if err == nil {
		err = agree(members, ranks, n)
	}
	if err != nil {
		w.err = err
		return
	}
	w.byRank = make([]*entry, n)
	for i, e := range w.entries {
		e.rank = ranks[i]
		w.byRank[e.rank] = e
	}
	w.asg = buildAssignment(members, ranks)
}

func (s *Server) barrier(c *sconn, w *world, rank int, m *message) error {
	s.mu.Lock()
	if w.barriers[m.Name] == nil {
		w.barriers[m.Name] = map[int]bool{}
	}
	w.barriers[m.Name][rank] = true
	w.notify()
	s.mu.Unlock()
	var err error
	ok, werr := s.await(c, w, s.timeout(m), func() bool {
		n := 0
		for r, e := range w.byRank {
			if w.barriers[m.Name][r] {
				n++
			} else if e.lost || e.left {
				err = &NodeLostError{Node: e.m.ref(r), Generation: w.gen, Detail: fmt.Sprintf("barrier %q cannot complete without it", m.Name)}
				return true
			}
		}
		return n == len(w.byRank)
	})
	if werr != nil {
		return werr
	}
	if !ok {
		s.mu.Lock()
		defer s.mu.Unlock()
		var late []NodeRef
		for r, e := range w.byRank {
			if !w.barriers[m.Name][r] {
				late = append(late, e.m.ref(r))
			}
		}
		return newError(ErrTimeout, fmt.Sprintf("barrier %q: these nodes did not reach it in time", m.Name), late...)
	}
	return err
}

func (s *Server) gather(c *sconn, w *world, m *message) (map[int][]byte, error) {
	var err error
	var got map[int][]byte
	ok, werr := s.await(c, w, s.timeout(m), func() bool {
		d := w.data[m.Name]
		for r, e := range w.byRank {
			if _, ok := d[r]; !ok && (e.lost || e.left) {
				err = &NodeLostError{Node: e.m.ref(r), Generation: w.gen, Detail: fmt.Sprintf("gather %q cannot complete: it is gone without publishing", m.Name)}
				return true
			}
		}
		if len(d) < len(w.byRank) {
			return false
		}
		got = make(map[int][]byte, len(d))
		for k, v := range d {
			got[k] = v
		}
		return true
	})
	if werr != nil {
		return nil, werr
	}
	if !ok {
		s.mu.Lock()
		defer s.mu.Unlock()
		var late []NodeRef
		for r, e := range w.byRank {
			if _, ok := w.data[m.Name][r]; !ok {
				late = append(late, e.m.ref(r))
			}
		}
		return nil, newError(ErrTimeout, fmt.Sprintf("gather %q: these nodes did not publish in time", m.Name), late...)
	}
	return got, err
}
