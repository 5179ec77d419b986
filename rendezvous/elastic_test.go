package rendezvous_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"tpurun/internal/failure"
	"tpurun/internal/testutil"
	"tpurun/internal/testutil/rdzvtest"
	"tpurun/rendezvous"
	"tpurun/rendezvous/tcp"
)

// Elastic worlds (MinNodes < NNodes) and node loss, on the embedded server and on etcd (etcd_test.go runs the
// same scenarios against a real etcd cluster).

func elastic(min int, lastCall time.Duration) func(int, *rendezvous.Config, *rendezvous.Member) {
	return func(i int, cfg *rendezvous.Config, m *rendezvous.Member) {
		cfg.MinNodes, cfg.LastCall = min, lastCall
		m.RunID = "run"
	}
}

func TestElastic(t *testing.T) {
	t.Parallel()
	t.Run("LastCall", func(t *testing.T) { testElasticLastCall(t, rdzvtest.NewCluster(t, tcp.Name, 3)) })
	t.Run("FullAtOnce", func(t *testing.T) { testElasticFull(t, rdzvtest.NewCluster(t, tcp.Name, 3)) })
	t.Run("TooFew", func(t *testing.T) { testElasticTooFew(t, rdzvtest.NewCluster(t, tcp.Name, 3)) })
	t.Run("NodeLostAndBack", func(t *testing.T) { testNodeLostAndBack(t, rdzvtest.NewCluster(t, tcp.Name, 3)) })
}

// Two of at most three nodes: the world completes with two when the last call is over, not before.
func testElasticLastCall(t *testing.T, c *rdzvtest.Cluster) {
	const lastCall = 600 * time.Millisecond
	c.Mutate = elastic(2, lastCall)
	start := time.Now()
	c.Start(context.Background(), []int{0, 1})
	el := time.Since(start)
	c.MustJoin()
	rdzvtest.AgreeOn(t, c.Sess[:2], 0, "node-0", "node-1")
	// Not before the last call; after it, c.Start's deadline comes long before the join timeout (which also
	// ends an elastic join that has enough nodes).
	if el < lastCall*8/10 {
		t.Fatalf("an elastic world of 2 completed after %s, before the last call of %s", el, lastCall)
	}
	var wg sync.WaitGroup
	for i, s := range c.Sess[:2] {
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
func testElasticFull(t *testing.T, c *rdzvtest.Cluster) {
	c.Mutate = elastic(2, rdzvtest.Never()) // a last call past c.Start's deadline: waiting it out fails the test
	c.Start(context.Background(), nil)
	c.MustJoin()
	rdzvtest.AgreeOn(t, c.Sess, 0, "node-0", "node-1", "node-2")
}

// One of at least two: the join times out naming the missing node.
func testElasticTooFew(t *testing.T, c *rdzvtest.Cluster) {
	c.Mutate = elastic(2, 200*time.Millisecond)
	c.Timeout = rdzvtest.WaitedOut() // node 0 registers first, however loaded the machine
	c.Start(context.Background(), []int{0})
	e := rdzvtest.RdzvErr(t, c.Errs[0], rendezvous.ErrMissingNodes)
	if len(e.Nodes) != 1 || e.Nodes[0].Rank != 1 {
		t.Fatalf("%v: want node rank 1 missing", e)
	}
}

// A world of three loses a real launcher process (SIGKILL): the others hear it lost and a barrier fails with a
// *NodeLostError naming it; they restart as generation 1 with two nodes (the last call); a node that comes back
// joins the latest generation, waits in generation 2 (the others see it waiting), and all three restart together.
func testNodeLostAndBack(t *testing.T, c *rdzvtest.Cluster, env ...string) {
	ctx := context.Background()
	// The last call must outlast the third node's join in generation 0 (two of min 2 open it), however loaded the
	// machine; generation 1 then waits it out with the two survivors.
	lastCall := rdzvtest.WaitedOut()
	c.Mutate = elastic(2, lastCall)
	env = append(env, "RDZV_TEST_MIN=2", "RDZV_TEST_LASTCALL="+lastCall.String(), "RDZV_TEST_GEN=latest", "RDZV_TEST_HOST=node-2")
	cmd, lines := rdzvtest.StartNodeProcess(t, c.Backend, c.Endpoint, 3, -1, c.HB, env...)
	// The process joins generation 0 before the others, so that the last call cannot close generation 0 without
	// it however long it takes to start: the three then complete the world at once.
	which := c.Prepare(ctx, []int{0, 1})
	waitRegistered(t, c, 1)
	c.Join(ctx, which)
	for _, i := range []int{0, 1} {
		if c.Errs[i] != nil {
			t.Fatalf("node %d: %v", i, c.Errs[i])
		}
	}
	rdzvtest.WaitLine(t, lines, "joined ")
	rdzvtest.AgreeOn(t, c.Sess[:2], 0, "node-0", "node-1", "node-2")

	rdzvtest.Killed(t, cmd)
	for _, i := range []int{0, 1} {
		f := rdzvtest.WaitFailure(t, c.Sess[i])
		if !f.Lost || f.Node.Host != "node-2" {
			t.Fatalf("node %d heard %+v, want node-2 lost", i, f)
		}
	}
	if e := rdzvtest.LostErr(t, c.Sess[0].Barrier(ctx, "after")); e.Node.Host != "node-2" || e.Generation != 0 {
		t.Fatalf("%v: want node-2 lost in generation 0", e)
	}

	// the survivors restart without it
	rejoin := func(gen int) []rendezvous.Session {
		t.Helper()
		sess := make([]rendezvous.Session, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range 2 {
			c.Sess[i].Close()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, m := c.Config(i)
				m.Generation = gen
				sess[i], errs[i] = c.Rdzv[i].Join(ctx, m)
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("node %d: join generation %d: %v", i, gen, err)
			}
			c.Sess[i] = sess[i]
		}
		return sess
	}
	rdzvtest.AgreeOn(t, rejoin(1), 1, "node-0", "node-1")

	// a node comes back: the latest generation is complete, so it waits in the next
	cfg, m := c.Config(3)
	r3, err := rendezvous.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r3.Close() })
	m.Generation = rendezvous.LatestGeneration
	back := make(chan rendezvous.Session, 1)
	go func() {
		s, err := r3.Join(ctx, m)
		if err != nil {
			t.Errorf("the returning node: %v", err)
		}
		back <- s
	}()
	testutil.WaitFor(t, "the returning node to wait in the next generation", func() error {
		n, err := c.Sess[0].Waiting(ctx)
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
	rdzvtest.AgreeOn(t, rejoin(2), 2, "node-0", "node-1", "node-3")
	s3 := <-back
	if s3 == nil {
		t.FailNow()
	}
	defer s3.Close()
	rdzvtest.AgreeOn(t, []rendezvous.Session{c.Sess[0], c.Sess[1], s3}, 2, "node-0", "node-1", "node-3")
	if n, err := c.Sess[0].Waiting(ctx); err != nil || n != 0 {
		t.Fatalf("%d waiting after the restart (%v), want 0", n, err)
	}
}

// waitRegistered waits until generation 0 of c's run has n nodes waiting for the world: on the server node 0
// hosts, or registered in etcd.
func waitRegistered(t *testing.T, c *rdzvtest.Cluster, n int) {
	t.Helper()
	if srv := tcp.HostedServer(c.Rdzv[0]); srv != nil {
		rdzvtest.WaitJoiners(t, srv, n)
		return
	}
	rdzvtest.WaitRegistered(t, c, n)
}

func TestElasticMembersValidate(t *testing.T) {
	for _, n := range []int{-1, 5} {
		_, err := rendezvous.New(context.Background(), rendezvous.Config{Backend: tcp.Name, Endpoint: "127.0.0.1:29400", NNodes: 4, MinNodes: n, NodeRank: -1,
			Conf: map[string]string{"is_host": "false"}})
		rdzvtest.RdzvErr(t, err, rendezvous.ErrConfig)
	}
	r, err := rendezvous.New(context.Background(), rendezvous.Config{Backend: tcp.Name, Endpoint: "127.0.0.1:29400", NNodes: 4, MinNodes: 2, NodeRank: -1,
		Conf: map[string]string{"is_host": "false"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Join(context.Background(), rendezvous.Member{Host: "h", LocalWorkers: 1, Rank: 3})
	if e := rdzvtest.RdzvErr(t, err, rendezvous.ErrConfig); e.Field != string(failure.RendezvousNodeRank) {
		t.Fatalf("%v", err)
	}
}
