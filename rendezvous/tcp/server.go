package tcp

import (
	"fmt"
	"net"
	"sync"
	"time"
	"tpurun/rendezvous/internal/agree"

	"go.uber.org/zap"

	"tpurun/internal/failure"
	"tpurun/rendezvous"
)

// Server is the embedded rendezvous server: it authenticates connections (handshake), hosts the worlds (one
// per generation: world), their barriers, published data and failures, and reports a client whose connection
// drops or goes silent as lost (dropped).
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
	host, _, err := agree.SplitEndpoint(failure.RendezvousListen, cfg.Addr, true)
	if err != nil {
		return nil, err
	}
	if !rendezvous.IsLoopback(host) && cfg.Token == "" && !cfg.AllowUnauthenticated {
		return nil, &rendezvous.Error{Kind: rendezvous.ErrNoToken, Field: string(failure.RendezvousListen), Value: cfg.Addr,
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
