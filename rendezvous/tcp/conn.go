package tcp

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"tpurun/rendezvous/internal/agree"

	"go.uber.org/zap"

	"tpurun/rendezvous"
)

// sconn is one authenticated client connection on the server.
type sconn struct {
	nc   net.Conn
	wmu  sync.Mutex
	done chan struct{}
	// joining counts the joins under way on the connection (frameReader.joining): while its world forms, the node
	// is waited for, within the join's timeout.
	joining atomic.Int32
	// guarded by Server.mu
	w    *world
	ent  *entry
	rank int
}

func (s *Server) send(c *sconn, m *message) {
	f, err := encodeFrame(m, s.cfg.MaxMessage)
	if err != nil {
		s.log.Debug("rendezvous send failed", zap.String("remote", c.nc.RemoteAddr().String()), zap.String("type", m.Type), zap.Error(err))
		c.nc.Close()
		return
	}
	s.write(c, m.Type, f)
}

// write writes one frame, given in parts (pre-encoded parts shared with other frames), with one writev. A
// connection that takes none of it for the silence limit (rendezvous.SilenceLimit) is closed; one that takes it
// slowly is written on (a node busy reading its share of a pod, in a process or on a host that runs late, is not a
// lost one).
func (s *Server) write(c *sconn, what string, parts ...[]byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	s.writeLocked(c, what, parts)
}

func (s *Server) writeLocked(c *sconn, what string, parts [][]byte) {
	b := net.Buffers(parts)
	for {
		c.nc.SetWriteDeadline(time.Now().Add(rendezvous.SilenceLimit(s.cfg.Heartbeat)))
		n, err := b.WriteTo(c.nc) // consumes what it wrote
		var ne net.Error
		if err == nil || (n > 0 && errors.As(err, &ne) && ne.Timeout()) {
			if err == nil {
				return
			}
			continue // the node reads, slowly
		}
		s.log.Debug("rendezvous send failed", zap.String("remote", c.nc.RemoteAddr().String()), zap.String("type", what), zap.Error(err))
		c.nc.Close()
		return
	}
}

// pong answers a ping. A node's heartbeat (a ping without an id) is not answered while a frame is being written to
// the node already: those bytes tell it the server lives, and the reader of its pings does not wait behind a share
// of a pod written to a node that reads it slowly. A ping with an id is a request, always answered.
func (s *Server) pong(c *sconn, m *message) {
	if m.ID != 0 {
		s.send(c, &message{Type: msgPong, ID: m.ID})
		return
	}
	if !c.wmu.TryLock() {
		return
	}
	defer c.wmu.Unlock()
	s.writeLocked(c, msgPong, [][]byte{pongFrame()})
}

func (s *Server) reply(c *sconn, id uint64, m *message, err error) {
	if m == nil {
		m = &message{}
	}
	m.Type, m.ID = msgReply, id
	if err != nil {
		m.Error = agree.ToWire(err)
	}
	s.send(c, m)
}

// sendReply answers request id with a reply whose field holds pre-encoded JSON (a gathered key's data).
func (s *Server) sendReply(c *sconn, id uint64, field string, value []byte) {
	head := replyHead(id, field)
	n := len(head) + len(value) + 1
	if n > s.cfg.MaxMessage {
		s.reply(c, id, nil, agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("the reply (%s) is %d bytes, over the limit of %d bytes", field, n, s.cfg.MaxMessage)))
		return
	}
	s.write(c, field, frameHeader(n), head, value, closeBrace)
}

// sendShare answers join id with node rank's share of the agreed world, from the parts encoded once (shares),
// and its slice's table beside it when it has one: the same bytes for every host of the slice.
func (s *Server) sendShare(c *sconn, id uint64, sh *agree.Shares, rank int) {
	parts := shareParts(id, sh, rank)
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n > s.cfg.MaxMessage {
		s.reply(c, id, nil, agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("this node's share of the world is %d bytes, over the limit of %d bytes (MaxMessage)", n, s.cfg.MaxMessage)))
		return
	}
	s.write(c, "assignment", parts...)
}

// shareParts is the frame of the reply to join id that carries node rank's share, in parts: those encoded once
// for every node (the common part, the slice's table, attached raw: attached) are shared, not copied.
func shareParts(id uint64, sh *agree.Shares, rank int) [][]byte {
	parts := append([][]byte{nil, replyHead(id, "assignment")}, sh.Value(rank)...)
	parts = append(parts, closeBrace)
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if t := sh.Table(rank); t != nil {
		parts[0] = attachedHeader(n, len(t))
		return append(parts, t)
	}
	parts[0] = frameHeader(n)
	return parts
}

// serve reads c's messages until it ends; each request is handled on its own goroutine.
func (s *Server) serve(c *sconn) {
	var reqs sync.WaitGroup
	defer func() {
		c.nc.Close()
		close(c.done)
		reqs.Wait()
		s.dropped(c)
	}()
	remote := c.nc.RemoteAddr().String()
	fr := newFrameReader(c.nc, s.cfg.MaxMessage)
	fr.joining = &c.joining
	for {
		m, err := live(c.nc, fr, rendezvous.SilenceLimit(s.cfg.Heartbeat), s.lag) // a node silent for SilentBeats heartbeats is lost
		if err != nil {
			var e *rendezvous.Error
			if errors.As(err, &e) {
				s.log.Warn("rendezvous message refused", zap.String("remote", remote), zap.Error(err))
				s.send(c, &message{Type: msgRejected, Error: agree.ToWire(err)})
			} else {
				s.log.Debug("rendezvous connection ended", zap.String("remote", remote), zap.Error(err))
			}
			return
		}
		switch m.Type {
		case msgPing:
			if m.LateMS > 0 { // the node runs late: so may the others, on its host or in its process
				s.lag.saw(time.Duration(m.LateMS)*time.Millisecond, time.Now())
			}
			s.pong(c, m)
			continue
		case msgJoin, msgBarrier, msgPublish, msgGather, msgFail, msgLeave, msgWaiting, msgFinish:
		default:
			s.send(c, &message{Type: msgRejected, Error: agree.ToWire(agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("a client may not send a %q message", m.Type)))})
			return
		}
		reqs.Add(1)
		go func() {
			defer reqs.Done()
			s.handle(c, m)
		}()
	}
}

// timeout is the time a request may wait: its own, else the server's.
func (s *Server) timeout(m *message) time.Duration {
	if m.TimeoutMS > 0 {
		return min(time.Duration(m.TimeoutMS)*time.Millisecond, 24*time.Hour)
	}
	return s.cfg.Timeout
}

// wait waits for done to close (true), the timeout to pass (false, nil) or the connection or server to end
// (ErrClosed).
func (s *Server) wait(c *sconn, done <-chan struct{}, timeout time.Duration) (bool, error) {
	select {
	case <-done:
		return true, nil
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return true, nil
	case <-t.C:
		return false, nil
	case <-c.done:
		return false, agree.NewError(rendezvous.ErrClosed, "connection closed")
	case <-s.done:
		return false, agree.NewError(rendezvous.ErrClosed, "server closed")
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
		s.beforeJoined(c, m, w, e)
		return
	}
	switch m.Type {
	case msgBarrier:
		s.reply(c, m.ID, nil, s.barrier(c, w, rank, m))
	case msgPublish:
		s.mu.Lock()
		w.publish(m.Name, rank, m.Data)
		s.mu.Unlock()
		s.reply(c, m.ID, nil, nil)
	case msgGather:
		s.gather(c, w, m)
	case msgFail:
		s.failed(c, w, e, rank, m)
	case msgLeave:
		s.left(c, w, e, rank, m)
	case msgWaiting:
		s.reply(c, m.ID, &message{Waiting: s.waiting(w.gen)}, nil)
	case msgFinish:
		s.closeJob(w, m.ExitCode)
		s.reply(c, m.ID, nil, nil)
	}
}

// beforeJoined answers a message of a connection whose join has not completed: a waiting node asking how the world
// forms (its join under way: w and e set), else a protocol error.
func (s *Server) beforeJoined(c *sconn, m *message, w *world, e *entry) {
	if m.Type == msgWaiting && w != nil && e != nil {
		s.reply(c, m.ID, s.formingProgress(w), nil)
		return
	}
	s.reply(c, m.ID, nil, agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("%s message before a completed join", m.Type)))
}
