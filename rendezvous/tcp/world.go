package tcp

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/setting"
	"tpurun/rendezvous"
	"tpurun/rendezvous/internal/agree"
)

// world is one generation on the server: its members, and once complete, their ranks, barriers, data and
// failures. Guarded by Server.mu.
//
// Every wait on a world is for one event, and each event wakes only its waiters: a join waits for the world to
// form (formed: complete, or failed), a barrier for its last arrival, a gather for its key's last publication. A
// node lost or gone fails at once the barriers and gathers still waiting for it (nodeGone). No event scans the
// world: an arrival, a publication or a loss costs the same in a world of 4 nodes and of 4096.
type world struct {
	gen      int
	nnodes   int // the most nodes
	min      int // the fewest nodes (nnodes unless elastic)
	lastCall time.Duration
	// hosts is the host list naming every node by rank, when the joiners name one and the server holds the same
	// (ServerConfig.Hosts): the missing are named by it. hostsSum is the sum of the joiners' list (hostsSum),
	// mixed set when joiners named different lists.
	hosts    []string
	hostsSum string
	mixed    bool
	entries  []*entry // in arrival order
	// progress is the progress line last told a waiting node, made at progressAt: one line serves every node
	// that asks within progressFresh (each line is made from every entry).
	progress   string
	progressAt time.Time
	// the entries by instance, by host and by requested rank
	byInstance map[string]*entry
	byHost     map[string]*entry
	byAsked    map[int]*entry
	complete   bool
	byRank     []*entry
	agreed     *agree.Agreed // the agreed world, once complete; each node gets its share
	named      bool          // the host list names every node: shares leave the names out
	shares     *agree.Shares // every node's share, encoded once
	err        error
	formed     chan struct{} // closed when the join ends: the world complete (agreed or err), or joinErr
	ended      bool          // formed is closed
	barriers   map[string]*barrier
	data       map[string]*gathering
	gone       []int // the ranks of the nodes lost or left, in that order
	failures   []rendezvous.Failure
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
	m    rendezvous.Member
	conn *sconn
	rank int
	left bool
	lost bool
}

// newWorld is generation gen, forming, with r's size range and host list.
func newWorld(gen int, r *joinReq, serverHosts []string, serverSum string) *world {
	w := &world{gen: gen, nnodes: r.nnodes, min: r.min, lastCall: r.lastCall, hostsSum: r.hostsSum,
		byInstance: map[string]*entry{}, byHost: map[string]*entry{}, byAsked: map[int]*entry{},
		barriers: map[string]*barrier{}, data: map[string]*gathering{}, formed: make(chan struct{})}
	if r.hostsSum != "" && r.hostsSum == serverSum {
		w.hosts = serverHosts
	}
	return w
}

// endJoin closes the join: every joiner waiting wakes and reads the outcome (the assignment or the error).
func (w *world) endJoin() {
	if !w.ended {
		w.ended = true
		close(w.formed)
	}
}

// failJoin ends the join with err for every joiner, unless it has ended.
func (w *world) failJoin(err error) {
	if !w.complete && w.joinErr == nil {
		w.stopLastCall()
		w.joinErr = err
		w.endJoin()
	}
}

func (w *world) add(e *entry) {
	w.entries = append(w.entries, e)
	w.index(e)
}

func (w *world) index(e *entry) {
	w.byInstance[e.m.Instance] = e
	if e.m.Host != "" {
		w.byHost[e.m.Host] = e
	}
	if e.m.Rank >= 0 {
		w.byAsked[e.m.Rank] = e
	}
}

func (w *world) unindex(e *entry) {
	delete(w.byInstance, e.m.Instance)
	if w.byHost[e.m.Host] == e {
		delete(w.byHost, e.m.Host)
	}
	if w.byAsked[e.m.Rank] == e {
		delete(w.byAsked, e.m.Rank)
	}
}

func (w *world) remove(e *entry) {
	w.unindex(e)
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
	return agree.Disagreement(setting.RendezvousNodes.Word(), w.gen, vals, refs)
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

// live reports whether x holds its host and node rank: not lost, not left, and (while the world forms) connected.
func (w *world) live(x *entry) bool {
	return x != nil && !x.lost && !x.left && (x.conn != nil || w.complete)
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

// closeJob moves the job to closed (Session.Finish): the verdict of w's generation was its last, with exit code
// code. Every node waiting in a later generation is told at once, and every later join is refused with it. The
// first call counts.
func (s *Server) closeJob(w *world, code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != nil {
		return
	}
	runID := ""
	if w.agreed != nil {
		runID = w.agreed.All.RunID
	}
	s.ended = &rendezvous.JobClosedError{RunID: runID, Generation: w.gen, ExitCode: code}
	for _, x := range s.worlds {
		if x != w {
			x.failJoin(s.ended)
		}
	}
	s.log.Info("rendezvous: job closed", zap.String("run_id", runID), zap.Int("generation", w.gen), zap.Int("exit_code", code))
}

// missing names the nodes that have not arrived: of an elastic world, those below its minimum.
func (w *world) missing(waited time.Duration) error {
	arrived := make([]rendezvous.Member, len(w.entries))
	for i, e := range w.entries {
		arrived[i] = e.m
	}
	return agree.Missing(w.gen, w.min, w.nnodes, arrived, w.hosts, waited)
}

// finish assigns ranks and checks agreement; called when the join is over with min..nnodes nodes present. It
// lays the world out and encodes every node's share once, then wakes the joiners.
func (w *world) finish() {
	w.complete = true
	defer w.endJoin()
	n := len(w.entries)
	members := make([]rendezvous.Member, n)
	for i, e := range w.entries {
		members[i] = e.m
	}
	ranks, err := agree.AssignRanks(members, n)
	if err == nil {
		err = agree.Agree(members, ranks, w.gen)
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
	w.agreed = agree.AgreeWorld(members, ranks)
	w.named = !w.mixed && w.agreed.NamedBySum(w.hostsSum)
	w.shares = w.agreed.Encode(w.named)
}

// barrier is one named barrier of a world: who arrived, and done, closed when the last node arrives or a node
// it waits for is gone (err).
type barrier struct {
	arrived []bool // by rank
	count   int
	done    chan struct{}
	over    bool
	err     error
}

func (b *barrier) end(err error) {
	if !b.over {
		b.over, b.err = true, err
		close(b.done)
	}
}

// barrierFor is the barrier name, made at its first arrival: failed at once when a node it needs is gone.
// With s.mu held.
func (w *world) barrierFor(name string) *barrier {
	b := w.barriers[name]
	if b == nil {
		b = &barrier{arrived: make([]bool, len(w.byRank)), done: make(chan struct{})}
		w.barriers[name] = b
		for _, r := range w.gone {
			b.end(w.lostErr(r, fmt.Sprintf("barrier %q cannot complete without it", name)))
			break
		}
	}
	return b
}

func (s *Server) barrier(c *sconn, w *world, rank int, m *message) error {
	s.mu.Lock()
	b := w.barrierFor(m.Name)
	if !b.arrived[rank] {
		b.arrived[rank] = true
		b.count++
	}
	if b.count == len(b.arrived) {
		b.end(nil)
	}
	s.mu.Unlock()
	ok, err := s.wait(c, b.done, s.timeout(m))
	if err != nil || ok {
		return cmp.Or(err, b.err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.over { // ended as the timeout passed
		return b.err
	}
	var late []rendezvous.NodeRef
	for r, e := range w.byRank {
		if !b.arrived[r] {
			late = append(late, e.m.Ref(r))
		}
	}
	return agree.NewError(rendezvous.ErrTimeout, fmt.Sprintf("barrier %q: these nodes did not reach it in time", m.Name), late...)
}

// gathering is the data published under one key: done is closed when every node has published, or a node that
// has not is gone (err). The gathered reply is encoded once, for every node (enc).
type gathering struct {
	data map[int][]byte
	done chan struct{}
	over bool
	err  error
	enc  *encoded
}

// encoded is a message part encoded once, by the first who needs it.
type encoded struct {
	once sync.Once
	b    []byte
	err  error
}

func (g *gathering) end(err error) {
	if !g.over {
		g.over, g.err = true, err
		close(g.done)
	}
}

// gatheringFor is key's gathering, made at its first publication or gather: failed at once when a node that has
// not published is gone. With s.mu held.
func (w *world) gatheringFor(key string) *gathering {
	g := w.data[key]
	if g == nil {
		g = &gathering{data: map[int][]byte{}, done: make(chan struct{}), enc: &encoded{}}
		w.data[key] = g
		for _, r := range w.gone {
			g.end(w.lostErr(r, fmt.Sprintf("gather %q cannot complete: it is gone without publishing", key)))
			break
		}
	}
	return g
}

// publish stores rank's data under key. A publication after the gathering completed replaces the data for later
// gathers (the map the earlier ones read is left as it was). With s.mu held.
func (w *world) publish(key string, rank int, data []byte) {
	g := w.gatheringFor(key)
	if g.over {
		g.data, g.enc = maps.Clone(g.data), &encoded{}
	}
	g.data[rank] = data
	if len(g.data) == len(w.byRank) {
		g.end(nil)
	}
}

func (s *Server) gather(c *sconn, w *world, m *message) {
	s.mu.Lock()
	g := w.gatheringFor(m.Name)
	s.mu.Unlock()
	ok, err := s.wait(c, g.done, s.timeout(m))
	if errors.Is(err, rendezvous.ErrClosed) {
		return
	}
	s.mu.Lock()
	if !ok && !g.over {
		var late []rendezvous.NodeRef
		for r, e := range w.byRank {
			if _, ok := g.data[r]; !ok {
				late = append(late, e.m.Ref(r))
			}
		}
		s.mu.Unlock()
		s.reply(c, m.ID, nil, agree.NewError(rendezvous.ErrTimeout, fmt.Sprintf("gather %q: these nodes did not publish in time", m.Name), late...))
		return
	}
	data, enc, gerr := g.data, g.enc, g.err
	s.mu.Unlock()
	if gerr != nil {
		s.reply(c, m.ID, nil, gerr)
		return
	}
	enc.once.Do(func() { enc.b, enc.err = json.Marshal(data) })
	if enc.err != nil {
		s.reply(c, m.ID, nil, fmt.Errorf("rendezvous: encode gather %q: %w", m.Name, enc.err))
		return
	}
	s.sendReply(c, m.ID, "gathered", enc.b)
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
