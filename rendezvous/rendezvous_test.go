package rendezvous_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"tpurun/internal/failure"
	"tpurun/internal/testutil"
	"tpurun/internal/testutil/rdzvtest"
	"tpurun/rendezvous"
	"tpurun/rendezvous/etcd"
	"tpurun/rendezvous/static"
	"tpurun/rendezvous/tcp"
)

// embedded are the backends on the embedded server; etcd_test.go runs the same scenarios against etcd.
var embedded = []string{tcp.Name, static.Name}

func TestAgreedWorld(t *testing.T) {
	t.Parallel()
	for _, b := range embedded {
		for _, n := range []int{2, 4, 8} {
			t.Run(fmt.Sprintf("%s/%d", b, n), func(t *testing.T) { rdzvtest.AgreedWorld(t, rdzvtest.NewCluster(t, b, n)) })
		}
	}
}

func TestMissingNodeTimesOut(t *testing.T) {
	t.Parallel()
	for _, b := range embedded {
		t.Run(b, func(t *testing.T) { testMissingNode(t, rdzvtest.NewCluster(t, b, 4)) })
	}
}

func testMissingNode(t *testing.T, c *rdzvtest.Cluster) {
	c.Timeout = rdzvtest.WaitedOut() // the others join first, however loaded the machine
	c.Mutate = func(i int, cfg *rendezvous.Config, m *rendezvous.Member) {
		if c.Backend != static.Name {
			m.Rank = i // so the missing one can be named by rank
		}
	}
	c.Start(context.Background(), []int{0, 1, 3}) // bounded by the deadline: the timeout must end the join
	for _, i := range []int{0, 1, 3} {
		e := rdzvtest.RdzvErr(t, c.Errs[i], rendezvous.ErrMissingNodes)
		if len(e.Nodes) != 1 || e.Nodes[0].Rank != 2 {
			t.Fatalf("node %d: missing %+v, want rank 2: %v", i, e.Nodes, e)
		}
		if c.Backend == static.Name && e.Nodes[0].Host != "node-2" {
			t.Fatalf("node %d: missing host %q, want node-2", i, e.Nodes[0].Host)
		}
		rdzvtest.RdzvErr(t, c.Errs[i], rendezvous.ErrTimeout)
	}
}

func TestDuplicateJoinRejected(t *testing.T) {
	t.Parallel()
	for _, b := range embedded {
		t.Run(b, func(t *testing.T) { testDuplicate(t, rdzvtest.NewCluster(t, b, 2)) })
	}
}

func testDuplicate(t *testing.T, c *rdzvtest.Cluster) {
	ctx := context.Background()
	c.Start(ctx, nil)
	c.MustJoin()
	// a second launcher on node-1 (another instance, same host and rank)
	cfg, m := c.Config(1)
	r, err := rendezvous.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	m.Rank = c.Sess[1].Assignment().NodeRank
	_, err = r.Join(ctx, m)
	e := rdzvtest.RdzvErr(t, err, rendezvous.ErrDuplicateNode)
	if len(e.Nodes) != 2 || e.Nodes[0].Instance != m.Instance || e.Nodes[1].Instance != c.Sess[1].Assignment().Nodes[m.Rank].Instance ||
		e.Nodes[0].Host != "node-1" || e.Nodes[1].Host != "node-1" {
		t.Fatalf("duplicate error does not name both instances: %v", err)
	}
	// the world is intact
	var wg sync.WaitGroup
	for i, s := range c.Sess {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Barrier(ctx, "after-dup"); err != nil {
				t.Errorf("node %d: barrier after the duplicate: %v", i, err)
			}
		}()
	}
	wg.Wait()
}

func TestIdempotentRejoin(t *testing.T) {
	t.Parallel()
	for _, b := range embedded {
		t.Run(b, func(t *testing.T) {
			c := rdzvtest.NewCluster(t, b, 2)
			var inst1 string
			c.Mutate = func(i int, cfg *rendezvous.Config, m *rendezvous.Member) {
				if i == 1 {
					if inst1 == "" {
						inst1 = m.Instance
					}
					m.Instance = inst1
				}
			}
			ctx := context.Background()
			c.Start(ctx, nil)
			c.MustJoin()
			cfg, m := c.Config(1)
			r, err := rendezvous.New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			s2, err := r.Join(ctx, m)
			if err != nil {
				t.Fatalf("rejoin of the same instance: %v", err)
			}
			defer s2.Close()
			a1, a2 := c.Sess[1].Assignment(), s2.Assignment()
			if a1.NodeRank != a2.NodeRank || a1.Nodes[0].Instance != a2.Nodes[0].Instance {
				t.Fatalf("rejoin got another world: %+v vs %+v", a2, a1)
			}
			// the replaced connection is not reported lost: the first thing node 0 hears is node 1's Fail.
			if err := s2.Fail(ctx, rendezvous.Failure{WorkerRank: 5, Reason: "exit 1"}); err != nil {
				t.Fatal(err)
			}
			f := rdzvtest.WaitFailure(t, c.Sess[0])
			if f.Lost || f.WorkerRank != 5 || f.Node.Instance != inst1 {
				t.Fatalf("node 0 heard %v first, want node 1's worker failure", f)
			}
		})
	}
}

func TestMismatchNamesOddNode(t *testing.T) {
	t.Parallel()
	for _, b := range embedded {
		t.Run(b, func(t *testing.T) {
			c := rdzvtest.NewCluster(t, b, 4)
			c.Mutate = func(i int, cfg *rendezvous.Config, m *rendezvous.Member) {
				if i == 2 {
					m.Accelerator = "v4-16"
				}
			}
			c.Start(context.Background(), nil)
			for i := range c.Errs {
				e := rdzvtest.MismatchErr(t, c.Errs[i], "accelerator type")
				if odd := e.Odd(); len(odd) != 1 || odd[0].Host != "node-2" {
					t.Fatalf("node %d: %v does not name node-2 alone", i, e)
				}
			}
		})
	}
}

func TestFailSpreads(t *testing.T) {
	t.Parallel()
	for _, b := range embedded {
		t.Run(b, func(t *testing.T) { testFailSpreads(t, rdzvtest.NewCluster(t, b, 4)) })
	}
}

func testFailSpreads(t *testing.T, c *rdzvtest.Cluster) {
	ctx := context.Background()
	c.HB = rdzvtest.Never() // the failure is pushed at once: nothing that waits for a heartbeat passes the wait
	c.Start(ctx, nil)
	c.MustJoin()
	if err := c.Sess[2].Fail(ctx, rendezvous.Failure{WorkerRank: 9, Reason: "worker rank 9 exited with code 1"}); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1, 3} {
		f := rdzvtest.WaitFailure(t, c.Sess[i])
		if f.Lost || f.Node.Host != "node-2" || f.Node.Rank != c.Sess[2].Assignment().NodeRank || f.WorkerRank != 9 {
			t.Fatalf("node %d heard %+v", i, f)
		}
	}
}

func TestGenerations(t *testing.T) {
	t.Parallel()
	c := rdzvtest.NewCluster(t, tcp.Name, 2)
	ctx := context.Background()
	c.Start(ctx, nil)
	c.MustJoin()
	for i, s := range c.Sess {
		s.Leave(ctx)
		s.Close()
		c.Sess[i] = nil
	}
	var wg sync.WaitGroup
	sess := make([]rendezvous.Session, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, m := c.Config(i)
			m.Generation = 1
			sess[i], errs[i] = c.Rdzv[i].Join(ctx, m)
		}()
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		defer sess[i].Close()
		if g := sess[i].Assignment().Generation; g != 1 {
			t.Fatalf("generation %d", g)
		}
	}
}

// A static world from a host list end to end (the launcher takes it from SLURM_JOB_NODELIST and the like): node 0
// (127.0.0.1) hosts the server on the port option and every node learns its rank from Config.NodeRank.
func TestStaticHostList(t *testing.T) {
	t.Parallel()
	_, port, _ := strings.Cut(rdzvtest.FreeAddr(t), ":")
	ctx := context.Background()
	rs := make([]*rendezvous.Rendezvous, 2)
	for i := range 2 {
		r, err := rendezvous.New(ctx, rendezvous.Config{Backend: static.Name, NodeRank: i, Hosts: []string{"127.0.0.1", "127.0.0.2"},
			Timeout: 10 * time.Second, RunID: "slurm", Conf: map[string]string{"port": port}})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		rs[i] = r
	}
	var wg sync.WaitGroup
	sess := make([]rendezvous.Session, 2)
	errs := make([]error, 2)
	for i, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess[i], errs[i] = r.Join(ctx, rendezvous.Member{LocalWorkers: 1, Accelerator: "cpu", Rank: -1})
		}()
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		defer sess[i].Close()
		a := sess[i].Assignment()
		if a.NodeRank != i || a.Nodes[1].Host != "127.0.0.2" || a.MasterAddr != "127.0.0.1" || a.WorldSize != 2 {
			t.Fatalf("node %d: %+v", i, a)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	cases := []rendezvous.Config{
		{Backend: "zookeeper", NNodes: 2, NodeRank: -1},
		{Backend: tcp.Name, NNodes: 0, NodeRank: -1},
		{Backend: tcp.Name, NNodes: 2, NodeRank: 2},
		{Backend: tcp.Name, NNodes: 2, NodeRank: -1, Conf: map[string]string{"bogus": "1"}},
		{Backend: tcp.Name, NNodes: 2, NodeRank: -1, Conf: map[string]string{"join_timeout": "-3"}},
		{Backend: tcp.Name, NNodes: 2, NodeRank: -1, Conf: map[string]string{"is_host": "maybe"}},
		{Backend: static.Name, NodeRank: -1},
		{Backend: static.Name, NodeRank: 0, NNodes: 3, Hosts: []string{"a", "b"}},
		{Backend: static.Name, NodeRank: 1, NNodes: 2},
		{Backend: etcd.Name, NNodes: 2, NodeRank: -1},
		{Backend: etcd.Name, NNodes: 2, NodeRank: -1, Endpoint: "a:1,,b:2"},
	}
	for i, cfg := range cases {
		r, err := rendezvous.New(context.Background(), cfg)
		if err == nil {
			r.Close()
			t.Errorf("case %d (%+v): no error", i, cfg)
			continue
		}
		if !errors.Is(err, rendezvous.ErrConfig) {
			t.Errorf("case %d: %v is not ErrConfig", i, err)
		}
	}
}

// Nobody at the endpoint: Join fails within the timeout, never hangs.
func TestNoServerIsBounded(t *testing.T) {
	t.Parallel()
	for _, b := range []string{tcp.Name, etcd.Name} {
		t.Run(b, func(t *testing.T) {
			cfg := rendezvous.Config{Backend: b, Endpoint: rdzvtest.FreeAddr(t), NNodes: 2, NodeRank: -1, Timeout: 800 * time.Millisecond,
				Conf: map[string]string{}}
			if b == tcp.Name {
				cfg.Conf["is_host"] = "false"
			}
			r, err := rendezvous.New(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			start := time.Now()
			_, err = r.Join(context.Background(), rendezvous.Member{Host: "h", LocalWorkers: 1, Rank: -1})
			if !errors.Is(err, rendezvous.ErrTimeout) && !errors.Is(err, rendezvous.ErrServerLost) {
				t.Fatalf("join with nobody at the endpoint: %v", err)
			}
			if el := time.Since(start); el > 5*time.Second {
				t.Fatalf("took %s", el)
			}
			t.Log(err)
		})
	}
}

// TestJoinCancelled: a join whose context is cancelled (the launcher got SIGTERM) returns at once with an error
// matching context.Canceled, not a timeout, whether it is still connecting or already waiting for the world.
func TestJoinCancelled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, isHost string }{{"connecting", "false"}, {"waiting", "true"}} {
		t.Run(tc.name, func(t *testing.T) {
			testJoinCancelled(t, rendezvous.Config{Backend: tcp.Name, Endpoint: rdzvtest.FreeAddr(t), NNodes: 2, NodeRank: -1, Timeout: rdzvtest.Never(),
				Conf: map[string]string{"is_host": tc.isHost}})
		})
	}
}

func testJoinCancelled(t *testing.T, cfg rendezvous.Config) {
	r, err := rendezvous.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := r.Join(ctx, rendezvous.Member{Host: "h", Addr: "127.0.0.1", LocalWorkers: 1, Rank: -1})
		done <- err
	}()
	if srv := tcp.HostedServer(r); srv != nil {
		rdzvtest.WaitJoiners(t, srv, 1) // waiting for the world on the server it hosts
	}
	cancel() // otherwise: still connecting (tcp), or wherever the etcd join is
	// The join timeout is past the deadline: only the cancel ends the join in time.
	err = testutil.Done(t, "the cancelled join to return", done)
	if !errors.Is(err, context.Canceled) || errors.Is(err, rendezvous.ErrTimeout) {
		t.Fatalf("cancelled join: %v, want context.Canceled", err)
	}
}

// TestStaticHostListsDisagree: nodes of a static world given different host lists (a mistake in one node's
// environment) still learn every node's own name: the shares name the nodes when the lists' sums differ, instead
// of each node naming them from its own list. The world's names are the ones each node has for itself.
func TestStaticHostListsDisagree(t *testing.T) {
	t.Parallel()
	ep := rdzvtest.FreeAddr(t)
	lists := [][]string{{"a", "b", "c"}, {"a", "b", "c"}, {"x", "y", "c"}}
	ctx := context.Background()
	rs := make([]*rendezvous.Rendezvous, 3)
	for i := range rs {
		r, err := rendezvous.New(ctx, rendezvous.Config{Backend: static.Name, Endpoint: ep, NodeRank: i, Hosts: lists[i], Timeout: rdzvtest.Never(), RunID: "r"})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		rs[i] = r
	}
	sess := make([]rendezvous.Session, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() {
			sess[i], errs[i] = r.Join(ctx, rendezvous.Member{LocalWorkers: 1, Accelerator: "v4-8", Rank: -1})
		})
	}
	wg.Wait()
	for i := range sess {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		defer sess[i].Close()
		if a := sess[i].Assignment(); !reflect.DeepEqual(a.Addrs(), []string{"a", "b", "c"}) || a.Self().Host != lists[0][i] {
			t.Fatalf("node %d: addrs %v, self %+v; want a, b, c", i, a.Addrs(), a.Self())
		}
	}
}

// TestConfigValidation: mistakes in the endpoint, token, run id, node counts and ranks are ErrConfig errors from
// New or Join, at once (no join, no timeout), naming the item in the package's words, never a command-line flag.
func TestConfigValidation(t *testing.T) {
	tcpConfig := func(ep, isHost string, n int) rendezvous.Config {
		return rendezvous.Config{Backend: tcp.Name, Endpoint: ep, NNodes: n, NodeRank: -1, Timeout: time.Minute,
			Conf: map[string]string{"is_host": isHost}}
	}
	with := func(c rendezvous.Config, f func(*rendezvous.Config)) rendezvous.Config { f(&c); return c }
	for _, tc := range []struct {
		name  string
		cfg   rendezvous.Config
		field failure.Setting
		kind  error
	}{
		{"port out of range", tcpConfig("127.0.0.1:99999", "false", 2), failure.RendezvousEndpoint, rendezvous.ErrConfig},
		{"port not a number", tcpConfig("127.0.0.1:http", "false", 2), failure.RendezvousEndpoint, rendezvous.ErrConfig},
		{"port 0 on a client", tcpConfig("127.0.0.1:0", "false", 2), failure.RendezvousEndpoint, rendezvous.ErrConfig},
		{"port 0 with is_host=auto", tcpConfig("127.0.0.1:0", "auto", 2), failure.RendezvousEndpoint, rendezvous.ErrConfig},
		{"bad address", tcpConfig("1.2.3.4.5:29400", "false", 2), failure.RendezvousEndpoint, rendezvous.ErrConfig},
		{"bad host name", tcpConfig("no such host:29400", "false", 2), failure.RendezvousEndpoint, rendezvous.ErrConfig},
		{"off loopback without a token", tcpConfig("10.1.2.3:29400", "false", 2), failure.RendezvousEndpoint, rendezvous.ErrNoToken},
		{"a host name without a token", tcpConfig("node0.example:29400", "false", 2), failure.RendezvousEndpoint, rendezvous.ErrNoToken},
		{"every interface without a token", tcpConfig(":29400", "false", 2), failure.RendezvousEndpoint, rendezvous.ErrNoToken},
		{"listen off loopback without a token", with(tcpConfig("127.0.0.1:29400", "true", 2), func(c *rendezvous.Config) { c.Listen = "0.0.0.0:0" }), failure.RendezvousListen, rendezvous.ErrNoToken},
		{"static hosts without a token", rendezvous.Config{Backend: static.Name, NodeRank: 1, Hosts: []string{"tpu-a", "tpu-b"}}, failure.RendezvousEndpoint, rendezvous.ErrNoToken},
		{"etcd port out of range", rendezvous.Config{Backend: etcd.Name, Endpoint: "127.0.0.1:2379,127.0.0.1:99999", NNodes: 2, NodeRank: -1}, failure.RendezvousEndpoint, rendezvous.ErrConfig},
		{"run id with a slash", with(tcpConfig("127.0.0.1:29400", "false", 2), func(c *rendezvous.Config) { c.RunID = "a/b" }), failure.RendezvousRunID, rendezvous.ErrConfig},
		{"run id ..", with(tcpConfig("127.0.0.1:29400", "false", 2), func(c *rendezvous.Config) { c.RunID = ".." }), failure.RendezvousRunID, rendezvous.ErrConfig},
		{"run id too long", with(tcpConfig("127.0.0.1:29400", "false", 2), func(c *rendezvous.Config) { c.RunID = strings.Repeat("r", 300) }), failure.RendezvousRunID, rendezvous.ErrConfig},
		{"min above max", with(tcpConfig("127.0.0.1:29400", "false", 2), func(c *rendezvous.Config) { c.MinNodes = 3 }), failure.RendezvousMinNodes, rendezvous.ErrConfig},
		{"rank at or above min", with(tcpConfig("127.0.0.1:29400", "false", 4), func(c *rendezvous.Config) { c.MinNodes, c.NodeRank = 2, 2 }), failure.RendezvousNodeRank, rendezvous.ErrConfig},
		{"elastic static", rendezvous.Config{Backend: static.Name, NNodes: 3, MinNodes: 2, NodeRank: 1, Endpoint: "127.0.0.1:29400"}, failure.RendezvousMinNodes, rendezvous.ErrConfig},
		{"bad last call", with(tcpConfig("127.0.0.1:29400", "false", 2), func(c *rendezvous.Config) { c.Conf["last_call_timeout"] = "soon" }), failure.RendezvousOption, rendezvous.ErrConfig},
		{"unknown backend", rendezvous.Config{Backend: "zookeeper", NNodes: 2, NodeRank: -1}, failure.RendezvousBackend, rendezvous.ErrConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r, err := rendezvous.New(context.Background(), tc.cfg)
			if err == nil {
				r.Close()
				t.Fatalf("no error")
			}
			e := rdzvtest.RdzvErr(t, err, tc.kind)
			if !errors.Is(err, rendezvous.ErrConfig) || e.Field != string(tc.field) {
				t.Fatalf("%v: field %q, want %q and ErrConfig", err, e.Field, tc.field)
			}
			if strings.Contains(err.Error(), "--") {
				t.Fatalf("%q names a command-line flag", err)
			}
			if el := time.Since(start); el > time.Second {
				t.Fatalf("took %s", el)
			}
			t.Log(err)
		})
	}
	// where port 0 is fine: the node that hosts, or a world of one
	for _, cfg := range []rendezvous.Config{tcpConfig("127.0.0.1:0", "true", 2), tcpConfig("127.0.0.1:0", "auto", 1)} {
		r, err := rendezvous.New(context.Background(), cfg)
		if err != nil {
			t.Fatalf("%+v: %v", cfg.Conf, err)
		}
		if strings.HasSuffix(r.Endpoint(), ":0") || tcp.HostedServer(r) == nil {
			t.Fatalf("hosting on port 0: endpoint %s", r.Endpoint())
		}
		r.Close()
	}
}

// TestEveryConfigErrorAvoidsFlags: the configuration errors of TestConfigErrors say what is wrong in the
// package's words.
func TestEveryConfigErrorAvoidsFlags(t *testing.T) {
	for _, cfg := range []rendezvous.Config{
		{Backend: tcp.Name, NNodes: 0, NodeRank: -1},
		{Backend: tcp.Name, NNodes: 2, NodeRank: 2},
		{Backend: tcp.Name, NNodes: 2, NodeRank: -1, Conf: map[string]string{"bogus": "1"}},
		{Backend: tcp.Name, NNodes: 2, NodeRank: -1, Conf: map[string]string{"join_timeout": "-3"}},
		{Backend: tcp.Name, NNodes: 2, NodeRank: -1, Conf: map[string]string{"is_host": "maybe"}},
		{Backend: tcp.Name, NNodes: 2, NodeRank: -1},
		{Backend: static.Name, NodeRank: -1},
		{Backend: static.Name, NodeRank: 0, NNodes: 3, Hosts: []string{"a", "b"}},
		{Backend: static.Name, NodeRank: 1, NNodes: 2},
		{Backend: etcd.Name, NNodes: 2, NodeRank: -1},
		{Backend: etcd.Name, NNodes: 2, NodeRank: -1, Endpoint: "a:1,,b:2"},
	} {
		_, err := rendezvous.New(context.Background(), cfg)
		if !errors.Is(err, rendezvous.ErrConfig) || strings.Contains(err.Error(), "--") {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
	if _, err := rendezvous.ParseConf("a=1,b"); !errors.Is(err, rendezvous.ErrConfig) || strings.Contains(err.Error(), "--") {
		t.Errorf("ParseConf: %v", err)
	}
}

func TestValidateRunID(t *testing.T) {
	for _, ok := range []string{"run-1", "job_2024.03.01", "a", "torchelastic:abc@host+1", strings.Repeat("x", rendezvous.MaxRunID), "with space", "ünïcode"} {
		if err := rendezvous.ValidateRunID(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "../x", `a\b`, "a\x00b", "a\nb", "tab\there", "\x7f", "bidi\u202egnp.exe", "k=v",
		strings.Repeat("x", rendezvous.MaxRunID+1), "\xff\xfe", " lead", "trail "} {
		err := rendezvous.ValidateRunID(bad)
		var e *rendezvous.Error
		if !errors.Is(err, rendezvous.ErrConfig) || !errors.As(err, &e) || e.Field != string(failure.RendezvousRunID) {
			t.Errorf("%q: %v, want an ErrConfig naming the run id", bad, err)
			continue
		}
		if strings.ContainsAny(err.Error(), "\x00\n\t\x7f") || len(err.Error()) > 400 {
			t.Errorf("%q: the message repeats the bad bytes or all of it: %q", bad, err)
		}
	}
}

// TestJoinPicksPorts: a join gives its member the ports node 0 shares that it lacks (a free master and coordinator
// port, told apart), keeps those it has, leaves the caller's map alone, and gives every later generation the
// ports the first join picked.
func TestJoinPicksPorts(t *testing.T) {
	ctx := context.Background()
	r, err := rendezvous.New(ctx, rendezvous.Config{Backend: tcp.Name, Endpoint: "127.0.0.1:0", NNodes: 1, NodeRank: -1,
		RunID: "ports", Timeout: 20 * time.Second, Conf: map[string]string{"is_host": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	given := map[string]int{rendezvous.PortMegascale: 8081}
	var first map[string]int
	for g := range 2 {
		s, err := r.Join(ctx, rendezvous.Member{Instance: "node", Host: "node", Addr: "127.0.0.1", LocalWorkers: 1, Generation: g, Rank: -1, Ports: given})
		if err != nil {
			t.Fatal(err)
		}
		ports := s.Assignment().Ports
		_ = s.Leave(ctx)
		s.Close()
		master, coord := ports[rendezvous.PortMaster], ports[rendezvous.PortCoordinator]
		if master == 0 || coord == 0 || master == coord || ports[rendezvous.PortMegascale] != 8081 {
			t.Fatalf("generation %d: ports %v: want a master and a coordinator port, told apart, beside the megascale port given", g, ports)
		}
		if first == nil {
			first = ports
		} else if !reflect.DeepEqual(ports, first) {
			t.Fatalf("generation 1's ports %v, want generation 0's %v", ports, first)
		}
	}
	if len(given) != 1 {
		t.Fatalf("the caller's map was changed: %v", given)
	}
}
