package tcp

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/setting"
	"tpurun/rendezvous"
	"tpurun/rendezvous/internal/agree"
	"tpurun/rendezvous/internal/progress"
)

// ServerConfig configures the embedded rendezvous server.
type ServerConfig struct {
	// Addr is the listen address, host:port. Empty means 127.0.0.1 on a free port. A host that is not loopback
	// (including an empty host, which means every interface) requires Token.
	Addr string
	// Token, when set, must be proved by every connection in the handshake (never sent, never logged).
	Token string
	// AllowUnauthenticated lets a server without a Token listen off loopback (Config.AllowUnauthenticated).
	AllowUnauthenticated bool
	// Heartbeat: a client silent rendezvous.SilentBeats heartbeats is dropped and reported lost. Default DefaultHeartbeat.
	Heartbeat time.Duration
	// AuthTimeout: a connection must complete the handshake this soon after it is accepted, or it is dropped.
	// Default DefaultAuthTimeout.
	AuthTimeout time.Duration
	// Timeout is used for requests that carry none. Default DefaultTimeout.
	Timeout time.Duration
	// MaxMessage bounds one message in bytes. Default DefaultMaxMessage.
	MaxMessage int
	// MaxConns bounds the authenticated connections (one per node and generation); a node beyond it is told the
	// server is full and retries. Default DefaultMaxConns.
	MaxConns int
	// MaxUnauth bounds the connections still in the handshake. A connection accepted when it is reached evicts
	// the oldest one whose peer has been silent for EvictGrace and has sent nothing (else the oldest silent one):
	// idle connections cannot lock a node out, since a node sends its hello at once and completes the handshake in
	// one round trip. Default DefaultMaxUnauth.
	MaxUnauth int
	// EvictGrace is how long a pending connection whose peer keeps the server waiting (with nothing sent) is safe
	// from eviction by a newer one; a handshake waiting for the server itself (a loaded server) is never evicted,
	// and one whose peer has sent its hello gets four times the server's lag more (at most AuthTimeout/2).
	// Default AuthTimeout/4, at most 100 ms: a flood of silent connections cannot churn the pool faster than
	// MaxUnauth per grace, and a real node answers within one round trip.
	EvictGrace time.Duration
	// WarnInterval: refused connections are logged as one summary line (with counts) per interval at most.
	// Default DefaultWarnInterval.
	WarnInterval time.Duration
	// Hosts is the job's host list in node order, when the node hosting the server knows one (Config.Hosts): a
	// join carries only its sum (hostsSum), and a join that times out names the hosts of the ranks that never
	// arrived when the joiners' list is this one.
	Hosts []string
	// Progress: while a world forms, who has arrived and who is missing are logged once per Progress. Default
	// 5 s (the option progress_interval).
	Progress time.Duration
	Logger   *zap.Logger
}

// Server defaults.
const (
	DefaultAuthTimeout = 5 * time.Second
	// DefaultMaxConns is room for a job of 256 slices of 64 hosts (16,384) twice over: each node's connection to a
	// generation and to the next, which it opens before it closes the old one, and nodes waiting for a restart.
	DefaultMaxConns     = 32768
	DefaultMaxUnauth    = 64
	DefaultWarnInterval = 10 * time.Second
)

func (c *ServerConfig) defaults() {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:0"
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = rendezvous.DefaultHeartbeat
	}
	if c.AuthTimeout <= 0 {
		c.AuthTimeout = DefaultAuthTimeout
	}
	if c.Timeout <= 0 {
		c.Timeout = rendezvous.DefaultTimeout
	}
	if c.MaxMessage <= 0 {
		c.MaxMessage = DefaultMaxMessage
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxUnauth <= 0 {
		c.MaxUnauth = DefaultMaxUnauth
	}
	if c.EvictGrace <= 0 {
		c.EvictGrace = min(c.AuthTimeout/4, graceMax)
	}
	if c.Progress <= 0 {
		c.Progress = progress.Default
	}
	if c.WarnInterval <= 0 {
		c.WarnInterval = DefaultWarnInterval
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// Server is the embedded rendezvous server: it authenticates connections (the handshake), hosts the worlds (one
// per generation), their barriers, published data and failures, and reports a client whose connection
// drops or goes silent as lost.
type Server struct {
	cfg   ServerConfig
	log   *zap.Logger
	ln    net.Listener
	tally *tally

	hostsSum string    // HostsSum(cfg.Hosts)
	lag      *lagMeter // how late this process runs what the network wakes

	mu      sync.Mutex
	pending []*pending    // in the handshake, in accept order
	freed   chan struct{} // a pending connection left the handshake: wakes an accept loop waiting for room
	conns   map[*sconn]struct{}
	worlds  map[int]*world
	latest  int                        // the highest generation any node joined
	runID   string                     // the run id of the job served, once its node joined: a node of another is refused (straggler)
	ended   *rendezvous.JobClosedError // the job is closed (Session.Finish): every join is refused with it
	changed chan struct{}              // closed and replaced when conns change
	closed  bool

	done chan struct{}
	wg   sync.WaitGroup
}

// Listen binds the server and starts serving in the background. Close stops it.
func Listen(cfg ServerConfig) (*Server, error) {
	cfg.defaults()
	host, _, err := agree.SplitEndpoint(setting.RendezvousListen, cfg.Addr, true)
	if err != nil {
		return nil, err
	}
	if !rendezvous.IsLoopback(host) && cfg.Token == "" && !cfg.AllowUnauthenticated {
		return nil, &rendezvous.Error{Kind: rendezvous.ErrNoToken, Field: string(setting.RendezvousListen), Value: cfg.Addr,
			Detail: "not loopback, and there is no token: anyone who can reach it could join; give every node the same token, or listen on 127.0.0.1"}
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: listen on %s: %w", cfg.Addr, err)
	}
	log := cfg.Logger.With(zap.String("rdzv_server", ln.Addr().String()))
	s := &Server{
		cfg: cfg, log: log, ln: ln, tally: newTally(log, cfg.WarnInterval), hostsSum: agree.HostsSum(cfg.Hosts),
		worlds: map[int]*world{}, conns: map[*sconn]struct{}{}, changed: make(chan struct{}), done: make(chan struct{}),
		freed: make(chan struct{}, 1), lag: newLagMeter(),
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
	for _, p := range s.pending {
		p.nc.Close()
	}
	s.pending = nil
	for c := range s.conns {
		c.nc.Close()
	}
	for _, w := range s.worlds {
		w.stopLastCall()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.lag.close()
	s.tally.stop()
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

// Stats is what the server has done with connections since it started, and holds now.
type Stats struct {
	Accepted      int64 // connections accepted
	Authenticated int64 // connections that completed the handshake
	// Refused counts the connections dropped before they were served, by reason: timed_out (no handshake within
	// AuthTimeout), hung_up, evicted (the oldest of MaxUnauth when another came), bad_hello (not a tpurun
	// handshake, such as a version 1 client), version, bad_token, full (MaxConns reached), accept_failed.
	Refused map[string]int64
	Pending int // connections in the handshake now
	Conns   int // authenticated connections now
}

// Joiners is the number of nodes in generation gen's join on the server now (0 when it has none).
func (s *Server) Joiners(gen int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.worlds[gen]; w != nil {
		return len(w.entries)
	}
	return 0
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	st := s.tally.stats()
	s.mu.Lock()
	st.Pending, st.Conns = len(s.pending), len(s.conns)
	s.mu.Unlock()
	return st
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
			s.tally.refused(reasonAcceptFailed, "", err) // EMFILE and the like: counted, logged once per interval
			select {
			case <-s.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		s.tally.accepted()
		s.mu.Lock()
		for !s.closed && len(s.pending) >= s.cfg.MaxUnauth {
			v, wait := s.victim()
			if v != nil {
				s.unpendLocked(v)
				v.nc.Close()
				s.tally.refused(reasonEvicted, v.nc.RemoteAddr().String(), fmt.Errorf("%d connections in the handshake", s.cfg.MaxUnauth))
				break
			}
			// every pending connection is younger than the grace: the next connections wait in the listen
			// backlog, so a flood cannot churn the pool faster than MaxUnauth per grace; a handshake that ends
			// (256 real nodes joining at once, say) makes room at once
			s.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-s.done:
			case <-t.C:
			case <-s.freed:
			}
			t.Stop()
			s.mu.Lock()
		}
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return
		}
		pc := &pending{nc: nc, at: time.Now()}
		s.pending = append(s.pending, pc)
		s.wg.Add(1)
		s.mu.Unlock()
		go s.handshake(pc)
	}
}

// victim is the pending connection to drop for a new one: among those whose peer has kept the server waiting for
// at least the grace (EvictGrace) with nothing sent since, the oldest that has not begun a handshake, else the
// oldest. A node sends its hello as soon as it connects and answers the challenge at once, so it is dropped only
// if it stays silent for the grace. A handshake that waits for the server (one whose goroutine has not run yet,
// bytes it has not read yet, or its own work: a loaded server) is never the peer's fault and never a victim: the
// accept loop waits for it to end instead. Nor is the silence of a peer that has sent its hello, as long as the
// server's own lag explains it (four times the lag, at most half of AuthTimeout, beyond the grace): on a host so
// loaded that the server runs late (thousands of nodes connecting at once; every node of a benchmark in this one
// process), a node is late to answer the challenge too. A peer that has sent nothing gets the grace alone: idle
// connections cost an attacker nothing, and a flood of them must not slow the pool down by loading the server.
// Without a candidate, wait says when to look again. With s.mu held.
func (s *Server) victim() (v *pending, wait time.Duration) {
	now := time.Now()
	lag := min(4*s.lag.over(lagWindow, now), s.cfg.AuthTimeout/2)
	wait = s.cfg.EvictGrace + lag
	var silent *pending
	for _, p := range s.pending { // in accept order: oldest first
		if p.waiting.IsZero() {
			continue // the server's to do
		}
		grace := s.cfg.EvictGrace
		if p.started {
			grace += lag
		}
		if left := grace - now.Sub(p.waiting); left > 0 {
			wait = min(wait, left)
			continue
		}
		if bytesWaiting(p.nc) {
			continue // sent, not read yet: the server's to do
		}
		if !p.started {
			return p, 0
		}
		if silent == nil {
			silent = p
		}
	}
	return silent, wait
}

// graceMax bounds the default EvictGrace.
const graceMax = 100 * time.Millisecond

// bytesWaiting reports whether the peer of nc has sent bytes that are not read yet. It peeks without blocking and
// without the connection's read lock, so it does not wait for a handshake reading the same connection.
func bytesWaiting(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	var b [1]byte
	var rerr error
	err = rc.Control(func(fd uintptr) {
		n, _, rerr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	})
	return err == nil && rerr == nil && n > 0
}

// unpend removes pc from the handshake list; false when it was no longer there (evicted, or the server closed).
func (s *Server) unpend(pc *pending) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handshakeEnded(pc)
}

func (s *Server) unpendLocked(pc *pending) bool {
	for i, p := range s.pending {
		if p == pc {
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			return true
		}
	}
	return false
}

// handshakeEnded removes pc from the handshake list as its handshake ends (admitted, refused, hung up) and wakes
// an accept loop waiting for room. Evictions do not wake it: under a flood of silent connections the pool must
// not churn faster than the grace allows. With s.mu held.
func (s *Server) handshakeEnded(pc *pending) bool {
	if !s.unpendLocked(pc) {
		return false
	}
	select {
	case s.freed <- struct{}{}:
	default: // a wake-up is already pending
	}
	return true
}

// admit turns an authenticated pending connection into a served one, unless it was evicted meanwhile (nil,
// statusOK) or the server is full (nil, statusFull).
func (s *Server) admit(pc *pending) (*sconn, uint16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.handshakeEnded(pc) || s.closed {
		return nil, statusOK
	}
	if len(s.conns) >= s.cfg.MaxConns {
		return nil, statusFull
	}
	c := &sconn{nc: pc.nc, rank: -1, done: make(chan struct{})}
	s.conns[c] = struct{}{}
	// a node that holds the token took this long to answer: no attacker's silence, a loaded node (or host)
	s.lag.saw(pc.waited, time.Now())
	s.tally.authenticated()
	return c, statusOK
}
