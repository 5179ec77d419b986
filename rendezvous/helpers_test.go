package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

	"tpurun/internal/testutil"
)

// cluster is n nodes of one backend run as goroutines.
type cluster struct {
	t        *testing.T
	backend  string
	endpoint string
	n        int
	rdzv     []*Rendezvous
	sess     []Session
	errs     []error
	mutate   func(i int, c *Config, m *Member)
	timeout  time.Duration
	hb       time.Duration
	prefix   string // etcd key prefix, one per test
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func hostName(i int) string { return fmt.Sprintf("node-%d", i) }

// never is a rendezvous timeout longer than any wait of a test (testutil.Deadline): a test that expects
// something at once gives it to the rendezvous, so that the slow way (waiting the timeout out) fails the wait
// instead of passing late.
func never() time.Duration { return 2 * testutil.Deadline() }

// waitedOut is a join timeout or a last call that a test waits out on purpose: long enough for every join that
// must come before it, on a loaded machine and on a 3-member etcd whose writes each need a raft round.
func waitedOut() time.Duration { return testutil.Scaled(5 * time.Second) }

// newCluster is n nodes of backend with the defaults a real job has (heartbeat) and a join timeout no test
// reaches; a test of a timeout or a heartbeat sets its own.
func newCluster(t *testing.T, backend string, n int) *cluster {
	return &cluster{t: t, backend: backend, n: n, endpoint: freeAddr(t), timeout: never(), hb: DefaultHeartbeat}
}

func (c *cluster) config(i int) (Config, Member) {
	cfg := Config{Backend: c.backend, Endpoint: c.endpoint, NNodes: c.n, NodeRank: -1, Timeout: c.timeout, Heartbeat: c.hb, RunID: "run-1"}
	m := Member{Instance: NewInstance(), Host: hostName(i), Addr: "127.0.0.1", LocalWorkers: 4, Accelerator: "v4-32", Rank: -1}
	switch c.backend {
	case BackendEtcd:
		cfg.Conf = map[string]string{"prefix": c.prefix}
	case BackendStatic:
		hosts := make([]string, c.n)
		for j := range hosts {
			hosts[j] = hostName(j)
		}
		cfg.Hosts, cfg.NodeRank = hosts, i
	case BackendTCP:
		cfg.Conf = map[string]string{"is_host": "false"}
		if i == 0 {
			cfg.Conf["is_host"] = "true"
		}
	}
	if c.mutate != nil {
		c.mutate(i, &cfg, &m)
	}
	return cfg, m
}

// start creates every node's Rendezvous (node 0 first, it hosts) and joins them concurrently. Only nodes in
// which are joined (all when nil).
func (c *cluster) start(ctx context.Context, which []int) {
	c.t.Helper()
	c.join(ctx, c.prepare(ctx, which))
}

// prepare creates the Rendezvous of the nodes in which (all when nil; node 0 first, it hosts the tcp server) and
// returns which.
func (c *cluster) prepare(ctx context.Context, which []int) []int {
	c.t.Helper()
	c.rdzv = make([]*Rendezvous, c.n)
	c.sess = make([]Session, c.n)
	c.errs = make([]error, c.n)
	if which == nil {
		for i := 0; i < c.n; i++ {
			which = append(which, i)
		}
	}
	for _, i := range which {
		cfg, _ := c.config(i)
		r, err := New(ctx, cfg)
		if err != nil {
			c.t.Fatalf("node %d: New: %v", i, err)
		}
		c.rdzv[i] = r
	}
	return which
}

// join joins the prepared nodes in which concurrently and waits for every join to return.
func (c *cluster) join(ctx context.Context, which []int) {
	c.t.Helper()
	var wg sync.WaitGroup
	for _, i := range which {
		_, m := c.config(i)
		r := c.rdzv[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.sess[i], c.errs[i] = r.Join(ctx, m)
		}()
	}
	joined := make(chan struct{})
	go func() { wg.Wait(); close(joined) }()
	c.t.Cleanup(func() { <-joined; c.close() })
	testutil.Done(c.t, "every node's Join to return", joined)
}

func (c *cluster) close() {
	for _, s := range c.sess {
		if s != nil {
			s.Close()
		}
	}
	for i := len(c.rdzv) - 1; i >= 0; i-- {
		if c.rdzv[i] != nil {
			c.rdzv[i].Close()
			c.rdzv[i] = nil
		}
	}
}

func (c *cluster) mustJoin() {
	c.t.Helper()
	for i, err := range c.errs {
		if err != nil {
			c.t.Fatalf("node %d: join: %v", i, err)
		}
	}
}

// checkWorld asserts that every node holds the same world, with distinct ranks 0..n-1.
func (c *cluster) checkWorld() {
	c.t.Helper()
	seen := map[int]bool{}
	var ref *Assignment
	for i, s := range c.sess {
		a := s.Assignment()
		if a.NodeRank < 0 || a.NodeRank >= c.n || seen[a.NodeRank] {
			c.t.Fatalf("node %d got node rank %d (seen %v)", i, a.NodeRank, seen)
		}
		seen[a.NodeRank] = true
		if a.Self().Host != hostName(i) || len(a.Addrs()) != c.n || a.Addrs()[a.NodeRank] != "127.0.0.1" {
			c.t.Fatalf("node %d: node rank %d is %q, want itself", i, a.NodeRank, a.Self().Host)
		}
		a.NodeRank = 0
		if ref == nil {
			ref = a
			continue
		}
		if !reflect.DeepEqual(a, ref) {
			c.t.Fatalf("node %d disagrees:\n%+v\nwant\n%+v", i, a, ref)
		}
	}
	if ref.WorldSize != 4*c.n || len(ref.Nodes) != c.n || ref.NNodes != c.n || ref.RunID != "run-1" || ref.Accelerator != "v4-32" {
		c.t.Fatalf("world %+v", ref)
	}
	for r, nd := range ref.AllNodes() {
		if nd.Rank != r || nd.FirstRank != 4*r || nd.LocalWorkers != 4 {
			c.t.Fatalf("node %d in world: %+v", r, nd)
		}
	}
	if ref.MasterAddr != "127.0.0.1" || ref.MasterPort() <= 0 || ref.Ports[PortCoordinator] <= 0 {
		c.t.Fatalf("master %s ports %v", ref.MasterAddr, ref.Ports)
	}
}

// rdzvErr asserts err is an *Error of kind and returns it.
func rdzvErr(t *testing.T, err error, kind error) *Error {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("error %v, want %v", err, kind)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %T %v is not an *Error", err, err)
	}
	return e
}

// mismatchErr asserts err is a *MismatchError (matching ErrMismatch) about setting and returns it.
func mismatchErr(t *testing.T, err error, setting string) *MismatchError {
	t.Helper()
	var e *MismatchError
	if !errors.As(err, &e) || !errors.Is(err, ErrMismatch) || e.Setting != setting || len(e.Values) < 2 {
		t.Fatalf("error %T %v, want a *MismatchError about the %s", err, err, setting)
	}
	return e
}

// lostErr asserts err is a *NodeLostError (matching ErrNodeLost) and returns it.
func lostErr(t *testing.T, err error) *NodeLostError {
	t.Helper()
	var e *NodeLostError
	if !errors.As(err, &e) || !errors.Is(err, ErrNodeLost) {
		t.Fatalf("error %T %v, want a *NodeLostError", err, err)
	}
	return e
}

// waitFailure waits for a failure on s's channel (Deadline at most).
func waitFailure(t *testing.T, s Session) Failure {
	t.Helper()
	timer := time.NewTimer(testutil.Deadline())
	defer timer.Stop()
	select {
	case f, ok := <-s.Failures():
		if !ok {
			t.Fatal("Failures closed without a failure")
		}
		return f
	case <-timer.C:
		t.Fatalf("no failure within %s", testutil.Deadline())
	}
	return Failure{}
}
