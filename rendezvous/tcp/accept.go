package tcp

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

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
