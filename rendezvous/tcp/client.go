package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"tpurun/rendezvous/internal/agree"

	"go.uber.org/zap"

	"tpurun/internal/failure"
	"tpurun/rendezvous"
)

// client is one node's connection to the embedded server: the handshake, then requests with ids, replies
// dispatched by id, failures pushed by the server, a ping every half heartbeat.
type client struct {
	addr string
	nc   net.Conn
	max  int
	hb   time.Duration
	log  *zap.Logger

	wmu sync.Mutex

	mu       sync.Mutex
	next     uint64
	pending  map[uint64]chan *message
	err      error // why the connection ended
	closing  bool
	left     bool
	failures chan rendezvous.Failure
	lag      *lagMeter    // how late this node runs: its pings and reads (a node's silence limit grows with it)
	owed     atomic.Int64 // when the first ping the server has not answered yet was sent (frameReader.owed)
	joining  atomic.Int32 // joins under way (frameReader.joining)

	done chan struct{}
	wg   sync.WaitGroup
}

// serverSilence is how many heartbeats of silence lose the server (see Liveness, before frameReader): one more than the
// rendezvous.SilentBeats that lose a node, since the one server of every node may stall longer than a node (it
// answers every node's ping), and a node that gives up on it ends its part of the job.
const serverSilence = rendezvous.SilentBeats + 1

// handshakeTimeout bounds one handshake attempt from the connect, the wait in the server's listen queue included:
// a node keeps its place in the queue rather than going to its back. A flood of idle connections ahead of it is
// drained at MaxUnauth per eviction grace (4096 of them in about 7 s), and a node that gave up after 10 s could
// find itself behind the whole flood again (TestSlowlorisDoesNotLockOut joined after 18 s in one of 8 runs, and
// failed at 20 s in one of 4). The server allows DefaultAuthTimeout once it has accepted the connection.
const handshakeTimeout = 30 * time.Second

// dial connects to addr and completes the handshake, retrying until ctx ends: the server may not be up yet, may
// be full, or may have dropped the connection to make room during a flood, and its host name may not resolve yet
// (a pod published as it starts: one log line, then quiet retries). A wrong token, another protocol version or
// something that is not a rendezvous server fails at once.
func dial(ctx context.Context, r *net.Resolver, addr, token string, hb time.Duration, max int, log *zap.Logger) (*client, error) {
	d := net.Dialer{Resolver: r}
	start := time.Now()
	backoff := 20 * time.Millisecond
	logged := false
	for tries := 1; ; tries++ {
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			var c *client
			var final bool
			if c, final, err = handshake(ctx, nc, addr, token, hb, max, log); c != nil || final {
				return c, err
			}
		} else if unresolved(err) && !logged {
			logged = true
			log.Info("rendezvous endpoint does not resolve yet; retrying until the join timeout (a pod is published in its headless service as it starts)",
				zap.String("endpoint", addr), zap.Error(err))
		}
		select {
		case <-ctx.Done():
			switch {
			case errors.Is(ctx.Err(), context.Canceled):
				return nil, fmt.Errorf("rendezvous: connecting to the server at %s: %w", addr, ctx.Err())
			case unresolved(err):
				return nil, unresolvedErr(addr, time.Since(start), tries, err, "node 0 (the endpoint host) hosts the rendezvous server there")
			}
			return nil, &rendezvous.Error{Kind: rendezvous.ErrTimeout, Field: string(failure.RendezvousEndpoint), Value: addr,
				Detail: fmt.Sprintf("could not reach the rendezvous server in %s (%d tries; the last: %v); start node 0 (or the endpoint host) and check the endpoint",
					time.Since(start).Round(time.Millisecond), tries, err)}
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}

// handshake authenticates a new connection nc and starts its client. Unless final, a failure is worth another try
// (the server full, or the connection dropped to make room during a flood).
func handshake(ctx context.Context, nc net.Conn, addr, token string, hb time.Duration, max int, log *zap.Logger) (c *client, final bool, err error) {
	deadline := time.Now().Add(handshakeTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Now()) }) // a cancelled join ends the handshake
	err = clientHandshake(nc, addr, token, deadline)
	stop()
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err == nil {
		c = &client{addr: addr, nc: nc, max: max, hb: hb, log: log, pending: map[uint64]chan *message{},
			failures: make(chan rendezvous.Failure, 1024), done: make(chan struct{}), lag: &lagMeter{}}
		c.wg.Add(2)
		go c.read()
		go c.ping()
		return c, true, nil
	}
	nc.Close()
	var e *rendezvous.Error
	if errors.As(err, &e) && e.Kind != rendezvous.ErrStoreLost {
		return nil, true, err
	}
	log.Debug("rendezvous handshake failed; retrying", zap.String("endpoint", addr), zap.Error(err))
	return nil, false, err
}

func (c *client) write(m *message) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(rendezvous.SilenceLimit(c.hb)))
	return writeMessage(c.nc, m, c.max)
}

func (c *client) ping() {
	defer c.wg.Done()
	t := time.NewTicker(c.hb / 2)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case tick := <-t.C:
			// a late ping: this process runs late, and says so (the server gives its nodes that much more)
			now := time.Now()
			late := now.Sub(tick)
			c.lag.saw(late, now)
			c.owed.CompareAndSwap(0, time.Now().UnixNano()) // the server owes an answer from now (before its answer can come)
			if err := c.write(&message{Type: msgPing, LateMS: late.Milliseconds()}); err != nil {
				c.log.Debug("rendezvous ping failed", zap.Error(err))
				c.nc.Close()
				return
			}
		}
	}
}

// read dispatches the server's messages until the connection ends, then fails every pending call with why.
func (c *client) read() {
	defer c.wg.Done()
	var end error
	fr := newFrameReader(c.nc, c.max)
	fr.owed, fr.joining = &c.owed, &c.joining
	for end == nil {
		m, err := live(c.nc, fr, serverSilence*c.hb, c.lag)
		if err != nil {
			end = err
			break
		}
		end = c.dispatch(m)
	}
	c.nc.Close()
	c.mu.Lock()
	quiet := c.closing || c.left
	if quiet {
		end = agree.NewError(rendezvous.ErrClosed, "session closed")
	} else {
		end = c.lostErr(end)
	}
	c.err = end
	pend := c.pending
	c.pending = map[uint64]chan *message{}
	c.mu.Unlock()
	close(c.done)
	for _, ch := range pend {
		close(ch)
	}
	if !quiet {
		c.log.Warn("rendezvous connection lost", zap.Error(end))
		var e *rendezvous.Error
		errors.As(end, &e)
		if e.Kind != rendezvous.ErrBadToken && e.Kind != rendezvous.ErrProtocol {
			c.push(rendezvous.Failure{Node: rendezvous.NodeRef{Rank: 0, Host: c.addr}, WorkerRank: -1, Lost: true, Store: true, Reason: end.Error(), At: time.Now()})
		}
	}
	close(c.failures)
}

// dispatch handles one message from the server; non-nil when the server ends the connection with it.
func (c *client) dispatch(m *message) error {
	switch m.Type {
	case msgPong:
	case msgReply:
		c.mu.Lock()
		ch := c.pending[m.ID]
		delete(c.pending, m.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	case msgFailure:
		if m.Failure != nil {
			c.push(*m.Failure)
		}
	case msgRejected:
		if m.Error != nil {
			return m.Error.Err()
		}
		return agree.NewError(rendezvous.ErrProtocol, "server rejected the connection")
	default:
		return agree.NewError(rendezvous.ErrProtocol, fmt.Sprintf("server sent a %q message", m.Type))
	}
	return nil
}

// lostErr is why the connection ended, when this node did not end it: the server's own error, else the store
// lost, saying how.
func (c *client) lostErr(end error) error {
	var e *rendezvous.Error
	if errors.As(end, &e) {
		return end
	}
	what := "dropped the connection"
	var ne net.Error
	if errors.As(end, &ne) && ne.Timeout() {
		what = fmt.Sprintf("stayed silent for %s", serverSilence*c.hb)
	} else if errors.Is(end, io.EOF) {
		what = "closed the connection"
	}
	return agree.StoreLost(c.addr, fmt.Sprintf("the rendezvous server %s (node 0 gone?): %v", what, end), rendezvous.NodeRef{Rank: 0, Host: c.addr})
}

func (c *client) push(f rendezvous.Failure) {
	select {
	case c.failures <- f:
	default:
		c.log.Error("rendezvous failure dropped: the Failures channel is full (nobody reads it?)", zap.Stringer("failure", f))
	}
}

// call sends m and waits for its reply; the wait is bounded by ctx, by the timeout the server was given plus
// one heartbeat, and by the connection.
func (c *client) call(ctx context.Context, m *message, timeout time.Duration) (*message, error) {
	if dl, ok := ctx.Deadline(); ok {
		// leave the server room to answer (with the names of the late nodes) before ctx ends
		left := time.Until(dl)
		timeout = min(timeout, left-min(max(left/20, 20*time.Millisecond), time.Second))
	}
	if timeout <= 0 {
		return nil, agree.NewError(rendezvous.ErrTimeout, fmt.Sprintf("no time left for %s", m.Type))
	}
	m.TimeoutMS = max(timeout.Milliseconds(), 1)
	ch := make(chan *message, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.next++
	m.ID = c.next
	c.pending[m.ID] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.pending, m.ID)
		c.mu.Unlock()
	}
	if err := c.write(m); err != nil {
		forget()
		c.nc.Close()
		<-c.done
		return nil, c.connErr()
	}
	t := time.NewTimer(timeout + serverSilence*c.hb)
	defer t.Stop()
	select {
	case r, ok := <-ch:
		if !ok {
			return nil, c.connErr()
		}
		if r.Error != nil {
			return r, r.Error.Err()
		}
		return r, nil
	case <-ctx.Done():
		forget()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, &rendezvous.Error{Kind: rendezvous.ErrTimeout, Detail: fmt.Sprintf("%s: the context deadline passed before the server at %s answered", m.Type, c.addr)}
		}
		return nil, fmt.Errorf("rendezvous %s: %w", m.Type, ctx.Err())
	case <-t.C:
		forget()
		return nil, agree.StoreLost(c.addr, fmt.Sprintf("the server did not answer a %s request within %s", m.Type, timeout+serverSilence*c.hb))
	}
}

func (c *client) connErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	return agree.StoreLost(c.addr, "the connection ended")
}

func (c *client) close() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	c.nc.Close()
	c.wg.Wait()
}
