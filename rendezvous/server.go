package rendezvous

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// ServerConfig configures the embedded rendezvous server.
type ServerConfig struct {
	// Addr is the listen address, host:port. Empty means 127.0.0.1 on a free port. A host that is not loopback
	// (including an empty host, which means every interface) requires Token.
	Addr string
	// Token, when set, must be carried by every message; compared in constant time, never logged.
	Token string
	// Heartbeat: a client silent this long is dropped and reported lost. Default DefaultHeartbeat.
	Heartbeat time.Duration
	// HelloTimeout: a connection that sends no first message this soon is dropped. Default 5s.
	HelloTimeout time.Duration
	// Timeout is used for requests that carry none. Default DefaultTimeout.
	Timeout time.Duration
	// MaxMessage bounds one message in bytes. Default DefaultMaxMessage.
	MaxMessage int
	// MaxConns bounds the open connections; more are refused. Default 4096.
	MaxConns int
	Logger   *zap.Logger
}

// Defaults.
const (
	DefaultHeartbeat = 5 * time.Second
	DefaultTimeout   = 5 * time.Minute
	DefaultPort      = 29400
)

func (c *ServerConfig) defaults() {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:0"
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.HelloTimeout <= 0 {
		c.HelloTimeout = 5 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxMessage <= 0 {
		c.MaxMessage = DefaultMaxMessage
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 4096
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// Server is the embedded rendezvous server: it hosts the worlds (one per generation), their barriers, published
// data and failures, and reports a client whose connection drops or goes silent as lost.
type Server struct {
	cfg ServerConfig
	log *zap.Logger
	ln  net.Listener
	sem chan struct{}

	mu      sync.Mutex
	worlds  map[int]*world
	conns   map[*sconn]struct{}
	changed chan struct{} // closed and replaced when conns change
	closed  bool

	done chan struct{}
	wg   sync.WaitGroup
}

// isLoopback reports whether host names only loopback addresses (an empty host means every interface).
func isLoopback(host string) bool {
	if host == "" {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Listen binds the server and starts serving in the background. Close stops it.
func Listen(cfg ServerConfig) (*Server, error) {
	cfg.defaults()
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, newError(ErrConfig, fmt.Sprintf("server address %q: %v; use host:port", cfg.Addr, err))
	}
	if !isLoopback(host) && cfg.Token == "" {
		return nil, newError(ErrNoToken, fmt.Sprintf("refusing to listen on %q without a token; set --rdzv-token (or TPURUN_RDZV_TOKEN) on every node, or listen on 127.0.0.1", cfg.Addr))
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: listen on %s: %w", cfg.Addr, err)
	}
	s := &Server{
		cfg: cfg, log: cfg.Logger.With(zap.String("rdzv_server", ln.Addr().String())), ln: ln,
		sem: make(chan struct{}, cfg.MaxConns), worlds: map[int]*world{}, conns: map[*sconn]struct{}{},
		changed: make(chan struct{}), done: make(chan struct{}),
	}
	s.wg.Add(1)
	go s.accept()
	s.log.Debug("rendezvous server listening", zap.Bool("token", cfg.Token != ""))
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server: the listener and every connection. Clients see ErrServerLost.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	err := s.ln.Close()
	for c := range s.conns {
		c.c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// Drain waits until no client is connected, or until timeout; it reports whether none is left.
func (s *Server) Drain(timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		s.mu.Lock()
		n, ch := len(s.conns), s.changed
		s.mu.Unlock()
		if n == 0 {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			return false
		case <-s.done:
			return false
		}
	}
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.log.Warn("rendezvous accept failed", zap.Error(err))
			select {
			case <-s.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		select {
		case s.sem <- struct{}{}:
		default:
			s.log.Warn("rendezvous connection refused: too many connections", zap.String("remote", nc.RemoteAddr().String()), zap.Int("max_conns", s.cfg.MaxConns))
			nc.SetWriteDeadline(time.Now().Add(time.Second))
			writeMessage(nc, &message{Type: msgRejected, Error: toWire(newError(ErrProtocol, fmt.Sprintf("server has its maximum of %d connections", s.cfg.MaxConns)))}, s.cfg.MaxMessage)
			nc.Close()
			continue
		}
		c := &sconn{c: nc, rank: -1, done: make(chan struct{})}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			<-s.sem
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

// sconn is one client connection on the server.
type sconn struct {
	c    net.Conn
	wmu  sync.Mutex
	done chan struct{}
	// guarded by Server.mu
	w    *world
	ent  *entry
	rank int
}

func (s *Server) send(c *sconn, m *message) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.c.SetWriteDeadline(time.Now().Add(s.cfg.Heartbeat))
	if err := writeMessage(c.c, m, s.cfg.MaxMessage); err != nil {
		s.log.Debug("rendezvous send failed", zap.String("remote", c.c.RemoteAddr().String()), zap.String("type", m.Type), zap.Error(err))
		c.c.Close()
	}
}

func (s *Server) reply(c *sconn, id uint64, m *message, err error) {
	if m == nil {
		m = &message{}
	}
	m.Type, m.ID = msgReply, id
	if err != nil {
		m.Error = toWire(err)
	}
	s.send(c, m)
}

func (s *Server) serve(c *sconn) {
	defer s.wg.Done()
	var reqs sync.WaitGroup
	defer func() {
		c.c.Close()
		close(c.done)
		reqs.Wait()
		s.dropped(c)
		<-s.sem
	}()
	remote := c.c.RemoteAddr().String()
	deadline := s.cfg.HelloTimeout
	for {
		c.c.SetReadDeadline(time.Now().Add(deadline))
		m, err := readMessage(c.c, s.cfg.MaxMessage)
		if err != nil {
			var e *Error
			if errors.As(err, &e) {
				s.log.Warn("rendezvous message refused", zap.String("remote", remote), zap.Error(err))
				s.send(c, &message{Type: msgRejected, Error: toWire(err)})
			} else {
				s.log.Debug("rendezvous connection ended", zap.String("remote", remote), zap.Error(err))
			}
			return
		}
		deadline = s.cfg.Heartbeat
		if s.cfg.Token != "" && subtle.ConstantTimeCompare([]byte(m.Token), []byte(s.cfg.Token)) != 1 {
			s.log.Warn("rendezvous message with a wrong token refused", zap.String("remote", remote), zap.String("type", m.Type))
			s.send(c, &message{Type: msgRejected, Error: toWire(newError(ErrBadToken, fmt.Sprintf("the server at %s refused the token of a %s message from %s; give every node the same --rdzv-token", s.Addr(), m.Type, remote)))})
			return
		}
		switch m.Type {
		case msgPing:
			s.send(c, &message{Type: msgPong, ID: m.ID})
			continue
		case msgJoin, msgBarrier, msgPublish, msgGather, msgFail, msgLeave:
		default:
			s.send(c, &message{Type: msgRejected, Error: toWire(newError(ErrProtocol, fmt.Sprintf("a client may not send a %q message", m.Type)))})
			return
		}
		reqs.Add(1)
		go func() {
			defer reqs.Done()
			s.handle(c, m)
		}()
	}
}

func (s *Server) timeout(m *message) time.Duration {
	if m.TimeoutMS > 0 {
		d := time.Duration(m.TimeoutMS) * time.Millisecond
		if d < 24*time.Hour {
			return d
		}
		return 24 * time.Hour
	}
	return s.cfg.Timeout
}

// await re-runs check (under s.mu) whenever the world changes, until it returns true, the timeout passes (false,
// nil) or the connection or server ends (ErrClosed).
func (s *Server) await(c *sconn, w *world, timeout time.Duration, check func() bool) (bool, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		s.mu.Lock()
		ok, ch := check(), w.changed
		s.mu.Unlock()
		if ok {
			return true, nil
		}
		select {
		case <-ch:
		case <-t.C:
			return false, nil
		case <-c.done:
			return false, newError(ErrClosed, "connection closed")
		case <-s.done:
			return false, newError(ErrClosed, "server closed")
		}
	}
}

func (s *Server) handle(c *sconn, m *message) {
	if m.Type == msgJoin {
		s.join(c, m)
		return
	}
	s.mu.Lock()
	w, e, rank := c.w, c.ent, c.rank
	s.mu.Unlock()
	if w == nil || e == nil || rank < 0 {
		s.reply(c, m.ID, nil, newError(ErrProtocol, fmt.Sprintf("%s message before a completed join", m.Type)))
		return
	}
	switch m.Type {
	case msgBarrier:
		s.reply(c, m.ID, nil, s.barrier(c, w, rank, m))
	case msgPublish:
		s.mu.Lock()
		if w.data[m.Name] == nil {
			w.data[m.Name] = map[int][]byte{}
		}
		w.data[m.Name][rank] = m.Data
		w.notify()
		s.mu.Unlock()
		s.reply(c, m.ID, nil, nil)
	case msgGather:
		got, err := s.gather(c, w, m)
		s.reply(c, m.ID, &message{Gathered: got}, err)
	case msgFail:
		if m.Failure == nil {
			s.reply(c, m.ID, nil, newError(ErrProtocol, "fail message without a failure"))
			return
		}
		f := *m.Failure
		f.Node = e.m.ref(rank)
		f.Lost = false
		s.spread(w, c, f)
		s.reply(c, m.ID, nil, nil)
	case msgLeave:
		s.mu.Lock()
		e.left = true
		w.notify()
		s.mu.Unlock()
		s.log.Debug("node left", zap.Int("node_rank", rank), zap.String("host", e.m.Host))
		s.reply(c, m.ID, nil, nil)
	}
}

// spread records f and pushes it to every other connection of the world.
func (s *Server) spread(w *world, from *sconn, f Failure) {
	s.mu.Lock()
	w.failures = append(w.failures, f)
	var to []*sconn
	for _, e := range w.entries {
		if e.conn != nil && e.conn != from && !e.left {
			to = append(to, e.conn)
		}
	}
	w.notify()
	s.mu.Unlock()
	s.log.Info("rendezvous failure spread", zap.Stringer("failure", f), zap.Int("to", len(to)))
	for _, c := range to {
		s.send(c, &message{Type: msgFailure, Failure: &f})
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
		w.notify()
		s.mu.Unlock()
		return
	}
	if e.left {
		w.notify()
		s.mu.Unlock()
		return
	}
	e.lost = true
	s.mu.Unlock()
	f := Failure{Node: e.m.ref(e.rank), WorkerRank: -1, Lost: true, At: time.Now(),
		Reason: fmt.Sprintf("its connection to the rendezvous server dropped or stayed silent for %s (launcher killed or host down)", s.cfg.Heartbeat)}
	s.spread(w, nil, f)
}

// world is one generation: its members, and once complete, their ranks, barriers, data and failures.
type world struct {
	gen      int
	nnodes   int
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
	// one missing-nodes error every joiner gets.
	deadline time.Time
	joinErr  error
	started  time.Time
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

func (s *Server) join(c *sconn, m *message) {
	mem := *m.Member
	s.mu.Lock()
	if c.ent != nil {
		s.mu.Unlock()
		s.reply(c, m.ID, nil, newError(ErrProtocol, "a second join on one connection; open a new connection per generation"))
		return
	}
	w := s.worlds[mem.Generation]
	if w == nil {
		w = &world{gen: mem.Generation, nnodes: m.NNodes, hosts: m.Hosts, barriers: map[string]map[int]bool{},
			data: map[string]map[int][]byte{}, changed: make(chan struct{})}
		s.worlds[mem.Generation] = w
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
				err := newError(ErrDuplicateNode, fmt.Sprintf("generation %d: the %s is already claimed by a live node; each node must have its own host name and node rank (check TPU_WORKER_ID / --node-rank, --node-name and that tpurun runs once per host)", mem.Generation, what),
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
			s.reply(c, m.ID, nil, newError(ErrWorldFull, fmt.Sprintf("generation %d already has its %d nodes; restart every node together or use a new generation", mem.Generation, w.nnodes), mem.ref(-1)))
			return
		}
		e = &entry{m: mem, conn: c, rank: -1}
		w.entries = append(w.entries, e)
	}
	c.w, c.ent = w, e
	if len(w.entries) == 1 && !w.complete && (w.deadline.IsZero() || w.joinErr != nil) {
		w.started, w.deadline, w.joinErr = time.Now(), time.Now().Add(s.timeout(m)), nil
	}
	if !w.complete && len(w.entries) >= w.nnodes {
		w.finish()
	}
	w.notify()
	s.mu.Unlock()
	if old != nil && old != c {
		s.mu.Lock()
		old.ent = nil
		s.mu.Unlock()
		old.c.Close()
	}
	timeout := min(s.timeout(m), time.Until(w.deadline))
	var asg *Assignment
	var jerr error
	ok, err := s.await(c, w, timeout, func() bool {
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
	})
	if err != nil {
		return
	}
	if !ok {
		s.mu.Lock()
		if w.complete {
			jerr = w.err
			if jerr == nil {
				a := *w.asg
				a.NodeRank = e.rank
				c.rank = e.rank
				asg = &a
			}
		} else {
			if w.joinErr == nil {
				w.joinErr = w.missing(time.Since(w.started))
				w.notify()
			}
			jerr = w.joinErr
		}
		s.mu.Unlock()
		if jerr != nil {
			s.log.Warn("rendezvous join failed", zap.Error(jerr))
		}
	}
	s.reply(c, m.ID, &message{Assignment: asg}, jerr)
}

// missing names the nodes that have not arrived.
func (w *world) missing(waited time.Duration) error {
	claimed := map[int]bool{}
	var arrived []string
	any := 0
	for _, e := range w.entries {
		if e.m.Rank >= 0 {
			claimed[e.m.Rank] = true
		} else {
			any++
		}
		arrived = append(arrived, e.m.ref(e.m.Rank).String())
	}
	var nodes []NodeRef
	for r := 0; r < w.nnodes; r++ {
		if claimed[r] {
			continue
		}
		if any > 0 {
			any--
			continue
		}
		n := NodeRef{Rank: r}
		if r < len(w.hosts) {
			n.Host = w.hosts[r]
		}
		nodes = append(nodes, n)
	}
	return newError(ErrMissingNodes, fmt.Sprintf("generation %d: %d of %d nodes arrived within %s (arrived: %s); start tpurun on the missing nodes or raise --rdzv-timeout",
		w.gen, len(w.entries), w.nnodes, waited.Round(time.Millisecond), strings.Join(arrived, ", ")), nodes...)
}

// finish assigns ranks and checks agreement; called with every node present.
func (w *world) finish() {
	w.complete = true
	members := make([]Member, len(w.entries))
	for i, e := range w.entries {
		members[i] = e.m
	}
	ranks, err := assignRanks(members, w.nnodes)
	if err == nil {
		err = agree(members, ranks, w.nnodes)
	}
	if err != nil {
		w.err = err
		return
	}
	w.byRank = make([]*entry, w.nnodes)
	for i, e := range w.entries {
		e.rank = ranks[i]
		w.byRank[e.rank] = e
	}
	w.asg = buildAssignment(members, ranks)
}

// assignRanks gives requested ranks to their requesters and the free ranks to the others, ordered by slice then
// arrival. members are in arrival order; the result is the rank of each.
func assignRanks(members []Member, nnodes int) ([]int, error) {
	ranks := make([]int, len(members))
	taken := map[int]int{}
	for i, m := range members {
		ranks[i] = -1
		if m.Rank >= 0 {
			if j, ok := taken[m.Rank]; ok {
				return nil, newError(ErrDuplicateNode, fmt.Sprintf("node rank %d requested twice", m.Rank), m.ref(m.Rank), members[j].ref(m.Rank))
			}
			taken[m.Rank] = i
			ranks[i] = m.Rank
		}
	}
	var rest []int
	for i := range members {
		if ranks[i] < 0 {
			rest = append(rest, i)
		}
	}
	sort.SliceStable(rest, func(a, b int) bool { return members[rest[a]].SliceID < members[rest[b]].SliceID })
	next := 0
	for _, i := range rest {
		for ; next < nnodes; next++ {
			if _, ok := taken[next]; !ok {
				break
			}
		}
		ranks[i] = next
		taken[next] = i
		next++
	}
	return ranks, nil
}

// agree checks that every member agrees on run id, accelerator type, workers per node and slice count; the odd
// nodes (those that differ from the most common value) are named.
func agree(members []Member, ranks []int, nnodes int) error {
	fields := []struct {
		name string
		val  func(Member) string
	}{
		{"run id", func(m Member) string { return m.RunID }},
		{"accelerator type", func(m Member) string { return m.Accelerator }},
		{"workers per node", func(m Member) string { return fmt.Sprint(m.LocalWorkers) }},
		{"number of slices", func(m Member) string { return fmt.Sprint(max(m.NumSlices, 1)) }},
	}
	for _, f := range fields {
		count := map[string]int{}
		first := map[string]int{}
		for i, m := range members {
			v := f.val(m)
			if _, ok := count[v]; !ok {
				first[v] = ranks[i]
			}
			count[v]++
		}
		if len(count) < 2 {
			continue
		}
		want, set := "", false
		for v, n := range count {
			if !set || n > count[want] || (n == count[want] && first[v] < first[want]) {
				want, set = v, true
			}
		}
		var odd []NodeRef
		var vals []string
		for i, m := range members {
			if v := f.val(m); v != want {
				odd = append(odd, m.ref(ranks[i]))
				vals = append(vals, fmt.Sprintf("%q on node rank %d", v, ranks[i]))
			}
		}
		return newError(ErrMismatch, fmt.Sprintf("%s differs: %d of %d nodes have %q but %s; give every node the same value",
			f.name, count[want], len(members), want, strings.Join(vals, ", ")), odd...)
	}
	return nil
}

// buildAssignment lays out the agreed world (NodeRank left for the caller).
func buildAssignment(members []Member, ranks []int) *Assignment {
	nodes := make([]Node, len(members))
	var m0 Member
	for i, m := range members {
		r := ranks[i]
		nodes[r] = Node{Rank: r, Host: m.Host, Addr: m.Addr, Instance: m.Instance, LocalWorkers: m.LocalWorkers, SliceID: m.SliceID}
		if r == 0 {
			m0 = m
		}
	}
	first := 0
	mega := ""
	for i := range nodes {
		nodes[i].FirstRank = first
		first += nodes[i].LocalWorkers
		if mega == "" && nodes[i].SliceID == 0 {
			mega = nodes[i].Addr
		}
	}
	ports := map[string]int{}
	for k, v := range m0.Ports {
		ports[k] = v
	}
	if p := ports[PortMegascale]; p != 0 && mega != "" {
		mega = net.JoinHostPort(mega, fmt.Sprint(p))
	}
	return &Assignment{RunID: m0.RunID, Generation: m0.Generation, Accelerator: m0.Accelerator, Nodes: nodes,
		WorldSize: first, NumSlices: max(m0.NumSlices, 1), MasterAddr: m0.Addr, Ports: ports, MegascaleCoordinator: mega}
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
				err = newError(ErrNodeLost, fmt.Sprintf("barrier %q cannot complete: the node is gone", m.Name), e.m.ref(r))
				return true
			}
		}
		return n == w.nnodes
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
				err = newError(ErrNodeLost, fmt.Sprintf("gather %q cannot complete: the node is gone without publishing", m.Name), e.m.ref(r))
				return true
			}
		}
		if len(d) < w.nnodes {
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
