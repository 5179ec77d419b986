package rendezvous

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"tpurun/internal/testutil"
)

// Elastic worlds (MinNodes < NNodes) and node loss, on the embedded server and on etcd (etcd_test.go runs the
// same scenarios against a real etcd cluster).

func elastic(min int, lastCall time.Duration) func(int, *Config, *Member) {
	return func(i int, cfg *Config, m *Member) {
		cfg.MinNodes, cfg.LastCall = min, lastCall
		m.RunID = "run"
	}
}

// hostsOf is the sorted host names of a world.
func hostsOf(a *Assignment) []string {
	var hs []string
	for _, n := range a.Nodes {
		hs = append(hs, n.Host)
	}
	slices.Sort(hs)
	return hs
}

// agreeOn asserts that the sessions hold one world of the given hosts and generation, ranks 0..n-1.
func agreeOn(t *testing.T, sess []Session, gen int, hosts ...string) {
	t.Helper()
	seen := map[int]bool{}
	for i, s := range sess {
		a := s.Assignment()
		if a.Generation != gen || !slices.Equal(hostsOf(a), hosts) || a.WorldSize != 4*len(hosts) || seen[a.NodeRank] {
			t.Fatalf("session %d: generation %d, hosts %v, world size %d, node rank %d; want generation %d of %v",
				i, a.Generation, hostsOf(a), a.WorldSize, a.NodeRank, gen, hosts)
		}
		seen[a.NodeRank] = true
		if a.Nodes[0].Instance != sess[0].Assignment().Nodes[0].Instance {
			t.Fatalf("session %d disagrees on node 0", i)
		}
	}
}

func TestElastic(t *testing.T) {
	t.Run("LastCall", func(t *testing.T) { testElasticLastCall(t, newCluster(t, BackendTCP, 3)) })
	t.Run("FullAtOnce", func(t *testing.T) { testElasticFull(t, newCluster(t, BackendTCP, 3)) })
	t.Run("TooFew", func(t *testing.T) { testElasticTooFew(t, newCluster(t, BackendTCP, 3)) })
	t.Run("NodeLostAndBack", func(t *testing.T) { testNodeLostAndBack(t, newCluster(t, BackendTCP, 3)) })
}

// Two of at most three nodes: the world completes with two when the last call is over, not before.
func testElasticLastCall(t *testing.T, c *cluster) {
	const lastCall = 600 * time.Millisecond
	c.mutate = elastic(2, lastCall)
	start := time.Now()
	c.start(context.Background(), []int{0, 1})
	el := time.Since(start)
	c.mustJoin()
	agreeOn(t, c.sess[:2], 0, "node-0", "node-1")
	// Not before the last call; after it, c.start's deadline comes long before the join timeout (which also
	// ends an elastic join that has enough nodes).
	if el < lastCall*8/10 {
		t.Fatalf("an elastic world of 2 completed after %s, before the last call of %s", el, lastCall)
	}
	var wg sync.WaitGroup
	for i, s := range c.sess[:2] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Barrier(context.Background(), "b"); err != nil {
				t.Errorf("node %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
}

// All three: the world completes at once, without waiting out a long last call.
func testElasticFull(t *testing.T, c *cluster) {
	c.mutate = elastic(2, never()) // a last call past c.start's deadline: waiting it out fails the test
	c.start(context.Background(), nil)
	c.mustJoin()
	agreeOn(t, c.sess, 0, "node-0", "node-1", "node-2")
}

// One of at least two: the join times out naming the missing node.
func testElasticTooFew(t *testing.T, c *cluster) {
	c.mutate = elastic(2, 200*time.Millisecond)
	c.timeout = waitedOut() // node 0 registers first, however loaded the machine
	c.start(context.Background(), []int{0})
	e := rdzvErr(t, c.errs[0], ErrMissingNodes)
	if len(e.Nodes) != 1 || e.Nodes[0].Rank != 1 {
		t.Fatalf("%v: want node rank 1 missing", e)
	}
}

// A world of three loses a real launcher process (SIGKILL): the others hear it lost and a barrier fails with a
// *NodeLostError naming it; they restart as generation 1 with two nodes (the last call); a node that comes back
// joins the latest generation, waits in generation 2 (the others see it waiting), and all three restart together.
func testNodeLostAndBack(t *testing.T, c *cluster, env ...string) {
	ctx := context.Background()
	// The last call must outlast the third node's join in generation 0 (two of min 2 open it), however loaded the
	// machine; generation 1 then waits it out with the two survivors.
	lastCall := waitedOut()
	c.mutate = elastic(2, lastCall)
	env = append(env, "RDZV_TEST_MIN=2", "RDZV_TEST_LASTCALL="+lastCall.String(), "RDZV_TEST_GEN=latest", "RDZV_TEST_HOST=node-2")
	cmd, lines := startNodeProcess(t, c.backend, c.endpoint, 3, -1, c.hb, env...)
	// The process joins generation 0 before the others, so that the last call cannot close generation 0 without
	// it however long it takes to start: the three then complete the world at once.
	which := c.prepare(ctx, []int{0, 1})
	waitRegistered(t, c, 1)
	c.join(ctx, which)
	for _, i := range []int{0, 1} {
		if c.errs[i] != nil {
			t.Fatalf("node %d: %v", i, c.errs[i])
		}
	}
	waitLine(t, lines, "joined ")
	agreeOn(t, c.sess[:2], 0, "node-0", "node-1", "node-2")

	killed(t, cmd)
	for _, i := range []int{0, 1} {
		f := waitFailure(t, c.sess[i])
		if !f.Lost || f.Node.Host != "node-2" {
			t.Fatalf("node %d heard %+v, want node-2 lost", i, f)
		}
	}
	if e := lostErr(t, c.sess[0].Barrier(ctx, "after")); e.Node.Host != "node-2" || e.Generation != 0 {
		t.Fatalf("%v: want node-2 lost in generation 0", e)
	}

	// the survivors restart without it
	rejoin := func(gen int) []Session {
		t.Helper()
		sess := make([]Session, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range 2 {
			c.sess[i].Close()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, m := c.config(i)
				m.Generation = gen
				sess[i], errs[i] = c.rdzv[i].Join(ctx, m)
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("node %d: join generation %d: %v", i, gen, err)
			}
			c.sess[i] = sess[i]
		}
		return sess
	}
	agreeOn(t, rejoin(1), 1, "node-0", "node-1")

	// a node comes back: the latest generation is complete, so it waits in the next
	cfg, m := c.config(3)
	r3, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r3.Close() })
	m.Generation = LatestGeneration
	back := make(chan Session, 1)
	go func() {
		s, err := r3.Join(ctx, m)
		if err != nil {
			t.Errorf("the returning node: %v", err)
		}
		back <- s
	}()
	testutil.WaitFor(t, "the returning node to wait in the next generation", func() error {
		n, err := c.sess[0].Waiting(ctx)
		if err != nil {
			return err
		}
		if n > 1 {
			t.Fatalf("%d nodes waiting, want 1", n)
		}
		if n != 1 {
			return fmt.Errorf("%d waiting", n)
		}
		return nil
	})
	agreeOn(t, rejoin(2), 2, "node-0", "node-1", "node-3")
	s3 := <-back
	if s3 == nil {
		t.FailNow()
	}
	defer s3.Close()
	agreeOn(t, []Session{c.sess[0], c.sess[1], s3}, 2, "node-0", "node-1", "node-3")
	if n, err := c.sess[0].Waiting(ctx); err != nil || n != 0 {
		t.Fatalf("%d waiting after the restart (%v), want 0", n, err)
	}
}

// waitRegistered waits until generation 0 of c's run has n nodes waiting for the world: on the server node 0
// hosts, or registered in etcd.
func waitRegistered(t *testing.T, c *cluster, n int) {
	t.Helper()
	if srv := c.rdzv[0].Server(); srv != nil {
		waitEntries(t, srv, n)
		return
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(c.endpoint, ","), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	cfg, m := c.config(0)
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

func TestElasticMembersValidate(t *testing.T) {
	for _, n := range []int{-1, 5} {
		_, err := New(context.Background(), Config{Backend: BackendTCP, Endpoint: "127.0.0.1:29400", NNodes: 4, MinNodes: n, NodeRank: -1,
			Conf: map[string]string{"is_host": "false"}})
		rdzvErr(t, err, ErrConfig)
	}
	r, err := New(context.Background(), Config{Backend: BackendTCP, Endpoint: "127.0.0.1:29400", NNodes: 4, MinNodes: 2, NodeRank: -1,
		Conf: map[string]string{"is_host": "false"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Join(context.Background(), Member{Host: "h", LocalWorkers: 1, Rank: 3})
	if e := rdzvErr(t, err, ErrConfig); e.Field != FieldNodeRank {
		t.Fatalf("%v", err)
	}
}
