// Package rdzvtest is the test plumbing of the rendezvous packages (rendezvous and its backends tcp, static and
// etcd): a cluster of nodes run as goroutines, a node run as a process of its own (the test binary re-executed,
// verb rdzvnode), and the assertions on the package's errors. It imports no backend: a test imports the backends
// it runs, and the cluster lays out each by its capabilities (rendezvous.Backend), not by its name.
package rdzvtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"tpurun/internal/testutil"
	"tpurun/rendezvous"
)

// Cluster is N nodes of one backend run as goroutines.
type Cluster struct {
	t        *testing.T
	Backend  string
	Endpoint string
	N        int
	Rdzv     []*rendezvous.Rendezvous
	Sess     []rendezvous.Session
	Errs     []error
	Mutate   func(i int, c *rendezvous.Config, m *rendezvous.Member)
	Timeout  time.Duration
	HB       time.Duration
	Prefix   string // etcd key prefix, one per test
}

// FreeAddr is a loopback address with a port free when it returns.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// HostName is node i's host name in a cluster.
func HostName(i int) string { return fmt.Sprintf("node-%d", i) }

// Never is a rendezvous timeout longer than any wait of a test (testutil.Deadline): a test that expects
// something at once gives it to the rendezvous, so that the slow way (waiting the timeout out) fails the wait
// instead of passing late.
func Never() time.Duration { return 2 * testutil.Deadline() }

// WaitedOut is a join timeout or a last call that a test waits out on purpose: long enough for every join that
// must come before it, on a loaded machine and on a 3-member etcd whose writes each need a raft round.
func WaitedOut() time.Duration { return testutil.Scaled(5 * time.Second) }

// NewCluster is n nodes of backend with the defaults a real job has (heartbeat) and a join timeout no test
// reaches; a test of a timeout or a heartbeat sets its own.
func NewCluster(t *testing.T, backend string, n int) *Cluster {
	return &Cluster{t: t, Backend: backend, N: n, Endpoint: FreeAddr(t), Timeout: Never(), HB: rendezvous.DefaultHeartbeat}
}

// NewEtcdCluster is n nodes of backend (etcd's name, given: rendezvous/etcd's own tests use this package) on the etcd
// at endpoint, under a key prefix of the test's own.
func NewEtcdCluster(t *testing.T, backend, endpoint string, n int) *Cluster {
	c := NewCluster(t, backend, n)
	c.Endpoint, c.Prefix = endpoint, "/test/"+t.Name()+"/"
	return c
}

// Config is node i's configuration and member: a static world named by a host list, a tcp world hosted by node 0,
// an etcd world under the cluster's key prefix; then Mutate.
func (c *Cluster) Config(i int) (rendezvous.Config, rendezvous.Member) {
	cfg := rendezvous.Config{Backend: c.Backend, Endpoint: c.Endpoint, NNodes: c.N, NodeRank: -1, Timeout: c.Timeout, Heartbeat: c.HB, RunID: "run-1"}
	m := rendezvous.Member{Instance: rendezvous.NewInstance(), Host: HostName(i), Addr: "127.0.0.1", LocalWorkers: 4, Accelerator: "v4-32", Rank: -1}
	b, err := rendezvous.Lookup(c.Backend)
	if err != nil {
		c.t.Fatal(err)
	}
	switch {
	case !b.HostsServer(): // etcd
		cfg.Conf = map[string]string{"prefix": c.Prefix}
	case !b.Elastic(): // static
		hosts := make([]string, c.N)
		for j := range hosts {
			hosts[j] = HostName(j)
		}
		cfg.Hosts, cfg.NodeRank = hosts, i
	default: // tcp
		cfg.Conf = map[string]string{"is_host": "false"}
		if i == 0 {
			cfg.Conf["is_host"] = "true"
		}
	}
	if c.Mutate != nil {
		c.Mutate(i, &cfg, &m)
	}
	return cfg, m
}

// Start creates every node's Rendezvous (node 0 first, it hosts) and joins them concurrently. Only nodes in
// which are joined (all when nil).
func (c *Cluster) Start(ctx context.Context, which []int) {
	c.t.Helper()
	c.Join(ctx, c.Prepare(ctx, which))
}

// Prepare creates the Rendezvous of the nodes in which (all when nil; node 0 first, it hosts the tcp server) and
// returns which.
func (c *Cluster) Prepare(ctx context.Context, which []int) []int {
	c.t.Helper()
	c.Rdzv = make([]*rendezvous.Rendezvous, c.N)
	c.Sess = make([]rendezvous.Session, c.N)
	c.Errs = make([]error, c.N)
	if which == nil {
		for i := 0; i < c.N; i++ {
			which = append(which, i)
		}
	}
	for _, i := range which {
		cfg, _ := c.Config(i)
		r, err := rendezvous.New(ctx, cfg)
		if err != nil {
			c.t.Fatalf("node %d: New: %v", i, err)
		}
		c.Rdzv[i] = r
	}
	return which
}

// Join joins the prepared nodes in which concurrently and waits for every join to return.
func (c *Cluster) Join(ctx context.Context, which []int) {
	c.t.Helper()
	var wg sync.WaitGroup
	for _, i := range which {
		_, m := c.Config(i)
		r := c.Rdzv[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Sess[i], c.Errs[i] = r.Join(ctx, m)
		}()
	}
	joined := make(chan struct{})
	go func() { wg.Wait(); close(joined) }()
	c.t.Cleanup(func() { <-joined; c.Close() })
	testutil.Done(c.t, "every node's Join to return", joined)
}

// Close closes every session and every Rendezvous (node 0 last).
func (c *Cluster) Close() {
	for _, s := range c.Sess {
		if s != nil {
			s.Close()
		}
	}
	for i := len(c.Rdzv) - 1; i >= 0; i-- {
		if c.Rdzv[i] != nil {
			c.Rdzv[i].Close()
			c.Rdzv[i] = nil
		}
	}
}

// MustJoin fails the test unless every node joined.
func (c *Cluster) MustJoin() {
	c.t.Helper()
	for i, err := range c.Errs {
		if err != nil {
			c.t.Fatalf("node %d: join: %v", i, err)
		}
	}
}

// CheckWorld asserts that every node holds the same world, with distinct ranks 0..n-1.
func (c *Cluster) CheckWorld() {
	c.t.Helper()
	ref := c.sameWorld()
	if ref.WorldSize != 4*c.N || len(ref.Nodes) != c.N || ref.NNodes != c.N || ref.RunID != "run-1" || ref.Accelerator != "v4-32" {
		c.t.Fatalf("world %+v", ref)
	}
	for r, nd := range ref.AllNodes() {
		if nd.Rank != r || nd.FirstRank != 4*r || nd.LocalWorkers != 4 {
			c.t.Fatalf("node %d in world: %+v", r, nd)
		}
	}
	if ref.MasterAddr != "127.0.0.1" || ref.MasterPort() <= 0 || ref.Ports[rendezvous.PortCoordinator] <= 0 {
		c.t.Fatalf("master %s ports %v", ref.MasterAddr, ref.Ports)
	}
}

// sameWorld asserts that every node holds itself at a distinct rank in the same world, and returns that world (as
// node rank 0 sees it).
func (c *Cluster) sameWorld() *rendezvous.Assignment {
	c.t.Helper()
	seen := map[int]bool{}
	var ref *rendezvous.Assignment
	for i, s := range c.Sess {
		a := s.Assignment()
		if a.NodeRank < 0 || a.NodeRank >= c.N || seen[a.NodeRank] {
			c.t.Fatalf("node %d got node rank %d (seen %v)", i, a.NodeRank, seen)
		}
		seen[a.NodeRank] = true
		if a.Self().Host != HostName(i) || len(a.Addrs()) != c.N || a.Addrs()[a.NodeRank] != "127.0.0.1" {
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
	return ref
}

// RdzvErr asserts err is an *Error of kind and returns it.
func RdzvErr(t *testing.T, err error, kind error) *rendezvous.Error {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("error %v, want %v", err, kind)
	}
	var e *rendezvous.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %T %v is not an *Error", err, err)
	}
	return e
}

// MismatchErr asserts err is a *MismatchError (matching ErrMismatch) about setting and returns it.
func MismatchErr(t *testing.T, err error, setting string) *rendezvous.MismatchError {
	t.Helper()
	var e *rendezvous.MismatchError
	if !errors.As(err, &e) || !errors.Is(err, rendezvous.ErrMismatch) || e.Setting != setting || len(e.Values) < 2 {
		t.Fatalf("error %T %v, want a *MismatchError about the %s", err, err, setting)
	}
	return e
}

// LostErr asserts err is a *NodeLostError (matching ErrNodeLost) and returns it.
func LostErr(t *testing.T, err error) *rendezvous.NodeLostError {
	t.Helper()
	var e *rendezvous.NodeLostError
	if !errors.As(err, &e) || !errors.Is(err, rendezvous.ErrNodeLost) {
		t.Fatalf("error %T %v, want a *NodeLostError", err, err)
	}
	return e
}

// WaitFailure waits for a failure on s's channel (Deadline at most).
func WaitFailure(t *testing.T, s rendezvous.Session) rendezvous.Failure {
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
	return rendezvous.Failure{}
}

// WaitJoiners waits until generation 0 on s (the tcp backend's hosted server) has n joiners.
func WaitJoiners(t *testing.T, s interface{ Joiners(gen int) int }, n int) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("generation 0 to have %d joiners", n), func() error {
		if got := s.Joiners(0); got != n {
			return fmt.Errorf("%d joiners", got)
		}
		return nil
	})
}

// HostsOf is the sorted host names of a world.
func HostsOf(a *rendezvous.Assignment) []string {
	var hs []string
	for _, n := range a.Nodes {
		hs = append(hs, n.Host)
	}
	slices.Sort(hs)
	return hs
}

// AgreeOn asserts that the sessions hold one world of the given hosts and generation, ranks 0..n-1.
func AgreeOn(t *testing.T, sess []rendezvous.Session, gen int, hosts ...string) {
	t.Helper()
	seen := map[int]bool{}
	for i, s := range sess {
		a := s.Assignment()
		if a.Generation != gen || !slices.Equal(HostsOf(a), hosts) || a.WorldSize != 4*len(hosts) || seen[a.NodeRank] {
			t.Fatalf("session %d: generation %d, hosts %v, world size %d, node rank %d; want generation %d of %v",
				i, a.Generation, HostsOf(a), a.WorldSize, a.NodeRank, gen, hosts)
		}
		seen[a.NodeRank] = true
		if a.Nodes[0].Instance != sess[0].Assignment().Nodes[0].Instance {
			t.Fatalf("session %d disagrees on node 0", i)
		}
	}
}

// BarrierAll passes a barrier on every session of c, within the deadline.
func BarrierAll(t *testing.T, c *Cluster, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline())
	defer cancel()
	var wg sync.WaitGroup
	for i, s := range c.Sess {
		wg.Go(func() {
			if err := s.Barrier(ctx, name); err != nil {
				t.Errorf("node %d: barrier %s: %v", i, name, err)
			}
		})
	}
	wg.Wait()
}

// WaitRegistered waits until generation 0 of c's run (on etcd) has n nodes registered in etcd, waiting for the
// world.
func WaitRegistered(t *testing.T, c *Cluster, n int) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(c.Endpoint, ","), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	cfg, m := c.Config(0)
	run := cfg.Conf["prefix"] + m.RunID + "/" // <prefix><run id>/<job>/0/members/<instance>
	testutil.WaitFor(t, fmt.Sprintf("%d nodes registered in generation 0 under %s", n, run), func() error {
		r, err := cli.Get(context.Background(), run, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return err
		}
		got := 0
		for _, kv := range r.Kvs {
			if strings.Contains(strings.TrimPrefix(string(kv.Key), run), "/0/members/") {
				got++
			}
		}
		if got != n {
			return fmt.Errorf("%d registered", got)
		}
		return nil
	})
}

// AgreedWorld is the scenario of a world agreed: every node of c joins, holds the same world (a fixed world in
// node rank order), passes a barrier, publishes and gathers every node's result, and leaves.
func AgreedWorld(t *testing.T, c *Cluster) {
	ctx := context.Background()
	c.Start(ctx, nil)
	c.MustJoin()
	c.CheckWorld()
	if b, _ := rendezvous.Lookup(c.Backend); !b.Elastic() { // static: the ranks are the host list's
		for i, s := range c.Sess {
			if s.Assignment().NodeRank != i {
				t.Fatalf("static node %d got rank %d", i, s.Assignment().NodeRank)
			}
		}
	}
	// barrier, publish and gather across the world
	var wg sync.WaitGroup
	got := make([]map[int][]byte, c.N)
	errs := make([]error, c.N)
	for i, s := range c.Sess {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = s.Barrier(ctx, "start"); errs[i] != nil {
				return
			}
			r := s.Assignment().NodeRank
			if errs[i] = s.Publish(ctx, "results", []byte(fmt.Sprintf("from %d", r))); errs[i] != nil {
				return
			}
			got[i], errs[i] = s.Gather(ctx, "results")
		}()
	}
	wg.Wait()
	for i := range c.Sess {
		if errs[i] != nil {
			t.Fatalf("node %d: %v", i, errs[i])
		}
		if len(got[i]) != c.N {
			t.Fatalf("node %d gathered %d results, want %d", i, len(got[i]), c.N)
		}
		for r, d := range got[i] {
			if string(d) != fmt.Sprintf("from %d", r) {
				t.Fatalf("node %d: result of rank %d is %q", i, r, d)
			}
		}
	}
	// everyone leaves: nobody is reported lost
	for i, s := range c.Sess {
		if err := s.Leave(ctx); err != nil {
			t.Fatalf("node %d leave: %v", i, err)
		}
	}
}

// LateNode starts a node that joins the latest generation (a late elastic node, a replacement) in the
// background; its join's result comes on the channel.
func (c *Cluster) LateNode(ctx context.Context, i int) <-chan error {
	c.t.Helper()
	cfg, m := c.Config(i)
	m.Generation = rendezvous.LatestGeneration
	r, err := rendezvous.New(ctx, cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { r.Close() })
	out := make(chan error, 1)
	go func() {
		s, err := r.Join(ctx, m)
		if s != nil {
			c.t.Cleanup(func() { s.Close() })
		}
		out <- err
	}()
	return out
}
