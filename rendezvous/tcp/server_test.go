package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/rdzvtest"
	"tpurun/rendezvous"
)

func listen(t *testing.T, cfg ServerConfig) *Server {
	t.Helper()
	s, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// joinOne joins a 1-node world on addr with token.
func joinOne(t *testing.T, addr, token string) (rendezvous.Session, error) {
	t.Helper()
	r, err := rendezvous.New(context.Background(), rendezvous.Config{Backend: Name, Endpoint: addr, NNodes: 1, NodeRank: -1, Token: token,
		Timeout: 5 * time.Second, Heartbeat: time.Second, Conf: map[string]string{"is_host": "false"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	s, err := r.Join(context.Background(), rendezvous.Member{Host: "h", Addr: "127.0.0.1", LocalWorkers: 1, Accelerator: "cpu", Rank: -1})
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

func TestToken(t *testing.T) {
	s := listen(t, ServerConfig{Token: "s3cret-token"})
	_, err := joinOne(t, s.Addr(), "wrong")
	rdzvtest.RdzvErr(t, err, rendezvous.ErrBadToken)
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error leaks the token: %v", err)
	}
	_, err = joinOne(t, s.Addr(), "")
	rdzvtest.RdzvErr(t, err, rendezvous.ErrBadToken)
	if _, err := joinOne(t, s.Addr(), "s3cret-token"); err != nil {
		t.Fatalf("right token: %v", err)
	}
}

func TestOffLoopbackNeedsToken(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0"} {
		_, err := Listen(ServerConfig{Addr: addr})
		rdzvtest.RdzvErr(t, err, rendezvous.ErrNoToken)
	}
	s, err := Listen(ServerConfig{Addr: "0.0.0.0:0", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// and through the tcp backend: a host told to listen everywhere without a token refuses
	_, err = rendezvous.New(context.Background(), rendezvous.Config{Backend: Name, Endpoint: "0.0.0.0:0", NNodes: 2, NodeRank: -1, Conf: map[string]string{"is_host": "true"}})
	rdzvtest.RdzvErr(t, err, rendezvous.ErrNoToken)
}

// rawReply reads one frame from nc, failing after the deadline.
func rawReply(t *testing.T, nc net.Conn) (*message, error) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(testutil.Deadline()))
	return readMessage(nc, DefaultMaxMessage)
}

func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// dialAuthed opens a raw connection that has completed the handshake with token.
func dialAuthed(t *testing.T, addr, token string) net.Conn {
	t.Helper()
	nc := dialRaw(t, addr)
	if err := clientHandshake(nc, addr, token, time.Now().Add(testutil.Deadline())); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	return nc
}

// TestBadClients: authenticated clients sending bad frames are answered with a protocol error and hung up on; a
// connection that never completes the handshake is dropped after the auth timeout.
func TestBadClients(t *testing.T) {
	s := listen(t, ServerConfig{AuthTimeout: 300 * time.Millisecond, MaxMessage: 1 << 16})
	frame := func(body string) []byte {
		b := make([]byte, 4+len(body))
		binary.BigEndian.PutUint32(b, uint32(len(body)))
		copy(b[4:], body)
		return b
	}
	cases := []struct {
		name string
		send []byte
	}{
		{"oversized", []byte{0x7f, 0xff, 0xff, 0xff}},
		{"max uint32", []byte{0xff, 0xff, 0xff, 0xff}},
		{"garbage", frame("not json at all")},
		{"truncated json", frame(`{"v":1,"type":"jo`)},
		{"wrong version", frame(`{"v":99,"type":"join"}`)},
		{"unknown type", frame(`{"v":1,"type":"shutdown"}`)},
		{"unknown field", frame(`{"v":1,"type":"ping","evil":1}`)},
		{"join without member", frame(`{"v":1,"type":"join","nnodes":2}`)},
		{"join bad nnodes", frame(`{"v":1,"type":"join","nnodes":-5,"member":{"instance":"x","local_workers":1,"rank":-1}}`)},
		{"server-only type", frame(`{"v":1,"type":"failure"}`)},
		{"barrier before join", frame(`{"v":1,"type":"barrier","id":3,"name":"x"}`)},
		{"two documents", frame(`{"v":1,"type":"ping"}{"v":1,"type":"ping"}`)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nc := dialAuthed(t, s.Addr(), "")
			if _, err := nc.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			m, err := rawReply(t, nc)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			if m.Error == nil {
				t.Fatalf("answer without an error: %+v", m)
			}
			if e := m.Error.Err(); !errors.Is(e, rendezvous.ErrProtocol) && !errors.Is(e, rendezvous.ErrConfig) {
				t.Fatalf("answer %v, want a protocol error", e)
			}
		})
	}
	t.Run("silent", func(t *testing.T) {
		nc := dialRaw(t, s.Addr())
		start := time.Now()
		_, err := rawReply(t, nc)
		if !errors.Is(err, io.EOF) {
			t.Fatalf("silent client: %v, want the server to hang up", err)
		}
		if el := time.Since(start); el > 3*time.Second {
			t.Fatalf("dropped after %s", el)
		}
	})
	// the server still serves
	if _, err := joinOne(t, s.Addr(), ""); err != nil {
		t.Fatalf("after bad clients: %v", err)
	}
}

// TestMaxConns: authenticated connections beyond MaxConns are told the server is full (a transient error the
// client retries), and counted.
func TestMaxConns(t *testing.T) {
	s := listen(t, ServerConfig{MaxConns: 2})
	dialAuthed(t, s.Addr(), "")
	dialAuthed(t, s.Addr(), "")
	nc := dialRaw(t, s.Addr())
	err := clientHandshake(nc, s.Addr(), "", time.Now().Add(testutil.Deadline()))
	if e := rdzvtest.RdzvErr(t, err, rendezvous.ErrServerLost); !strings.Contains(e.Detail, "maximum of connections") {
		t.Fatalf("third connection: %v", err)
	}
	if st := s.Stats(); st.Conns != 2 || st.Refused["full"] != 1 || st.Authenticated != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestServerClosedMidRun(t *testing.T) {
	c := rdzvtest.NewCluster(t, Name, 3)
	ctx := context.Background()
	c.Start(ctx, nil)
	c.MustJoin()
	HostedServer(c.Rdzv[0]).Close()
	for i := 1; i < 3; i++ {
		f := rdzvtest.WaitFailure(t, c.Sess[i])
		if !f.Lost || f.Node.Rank != 0 {
			t.Fatalf("node %d heard %+v, want the server lost", i, f)
		}
		err := c.Sess[i].Barrier(ctx, "x")
		rdzvtest.RdzvErr(t, err, rendezvous.ErrServerLost)
	}
}

// TestVictimIsThePeersSilence: a full handshake pool evicts a connection only for its peer's own silence, past
// the grace (and the server's own lag): the idle one that never began a handshake first, then a silent one that did; never one whose bytes
// wait for the server, one the server is working on (reading, computing, writing: a loaded server), or one silent
// for less than the grace (then wait says when to look again).
func TestVictimIsThePeersSilence(t *testing.T) {
	const grace = time.Second
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// conn returns the server side of a loopback connection whose client has written sent.
	conn := func(sent string) net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		sc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sc.Close() })
		if sent != "" {
			if _, err := c.Write([]byte(sent)); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, "the bytes to arrive", func() bool { return bytesWaiting(sc) })
		}
		return sc
	}
	long, now := time.Now().Add(-time.Hour), time.Now()
	busy := &pending{nc: conn(""), at: long, started: true}                     // the server's to do
	sent := &pending{nc: conn("TPRZ"), at: long, started: false, waiting: long} // bytes the server has not read
	young := &pending{nc: conn(""), at: now, started: false, waiting: now}      // silent for less than the grace
	silent := &pending{nc: conn(""), at: long, started: true, waiting: long}    // began a handshake, then silence
	idle := &pending{nc: conn(""), at: long.Add(time.Minute), waiting: long}    // never sent anything
	s := &Server{cfg: ServerConfig{EvictGrace: grace, AuthTimeout: 20 * grace}, lag: &lagMeter{}}
	for _, tc := range []struct {
		pool []*pending
		want *pending
	}{
		{[]*pending{busy, sent, young}, nil},
		{[]*pending{busy, sent, silent, young, idle}, idle},
		{[]*pending{busy, sent, silent, young}, silent},
	} {
		s.pending = tc.pool
		v, wait := s.victim()
		if v != tc.want {
			t.Fatalf("pool of %d: victim %+v, want %+v", len(tc.pool), v, tc.want)
		}
		if v == nil && (wait <= 0 || wait > grace) {
			t.Fatalf("no victim: look again in %s, want within the grace %s", wait, grace)
		}
	}
	// A server that runs late (its lag: thousands of nodes connecting at once, or every node of a benchmark in its
	// process) takes the silence of a peer that sent its hello, for less than the grace and four times its lag, for
	// its own lateness, not the peer's; not the silence of a peer that has sent nothing.
	s.lag.saw(grace, time.Now())
	answering := &pending{nc: conn(""), at: long, started: true, waiting: time.Now().Add(-2 * grace)}
	s.pending = []*pending{answering}
	if v, wait := s.victim(); v != nil || wait <= grace || wait > 5*grace {
		t.Fatalf("silent for twice the grace on a server lagging a grace: victim %+v, look again in %s; want none, within %s", v, wait, 5*grace)
	}
	idler := &pending{nc: conn(""), at: long, waiting: time.Now().Add(-2 * grace)}
	s.pending = []*pending{answering, idler}
	if v, _ := s.victim(); v != idler {
		t.Fatalf("victim %+v, want the idle one (silent for twice the grace)", v)
	}
}

// TestJoinValidatesMember: a member's run id and host name are checked before anything is sent, and by the
// server on what it receives.
func TestJoinValidatesMember(t *testing.T) {
	s := listen(t, ServerConfig{})
	r, err := rendezvous.New(context.Background(), rendezvous.Config{Backend: Name, Endpoint: s.Addr(), NNodes: 1, NodeRank: -1, Timeout: 5 * time.Second,
		Conf: map[string]string{"is_host": "false"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, m := range []rendezvous.Member{
		{Host: "h", LocalWorkers: 1, Rank: -1, RunID: "../../etc"},
		{Host: "h/../x", LocalWorkers: 1, Rank: -1},
		{Host: "h\nINFO forged log line", LocalWorkers: 1, Rank: -1},
		{Host: "h", LocalWorkers: 1, Rank: -1, Instance: "a/b"},
		{Host: "h", LocalWorkers: 1, Rank: -2},
		{Host: "h", LocalWorkers: 1, Rank: -1, Generation: -2},
	} {
		if _, err := r.Join(context.Background(), m); !errors.Is(err, rendezvous.ErrConfig) {
			t.Errorf("%+v: %v", m, err)
		}
	}
	if st := s.Stats(); st.Accepted != 0 {
		t.Fatalf("a bad member reached the server: %+v", st)
	}
}
