package rendezvous

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/etcdtest"
)

// newEtcdCluster is a cluster of rendezvous nodes on etcd, with a key prefix of its own.
func newEtcdCluster(t *testing.T, ec *etcdtest.Cluster, n int) *cluster {
	c := newCluster(t, BackendEtcd, n)
	c.endpoint = ec.Endpoint()
	c.prefix = "/test/" + t.Name() + "/"
	return c
}

// lossHeartbeat is the heartbeat of the etcd tests that wait for a dead node's lease to run out: a lease lives two
// heartbeats, so half the default keeps that wait at the default heartbeat (5 s), renewed as often as before.
const lossHeartbeat = DefaultHeartbeat / 2

// TestEtcd runs the multi-node scenarios against one real 3-member etcd cluster.
func TestEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("etcd cluster: not in -short")
	}
	ec := etcdtest.Start(t, 3) // heavy: takes the slot for the whole test
	for _, n := range []int{2, 4, 8} {
		t.Run(fmt.Sprintf("AgreedWorld/%d", n), func(t *testing.T) { testAgreedWorld(t, newEtcdCluster(t, ec, n)) })
	}
	t.Run("AgreedWorld/Chunked", func(t *testing.T) { testChunkedWorld(t, newEtcdCluster(t, ec, 8)) })
	t.Run("CounterGone", func(t *testing.T) { testCounterGone(t, newEtcdCluster(t, ec, 3)) })
	t.Run("CounterRetires", func(t *testing.T) { testCounterRetires(t, newEtcdCluster(t, ec, 3)) })
	t.Run("DeparturesCompacted", func(t *testing.T) { testDeparturesCompacted(t, newEtcdCluster(t, ec, 3)) })
	t.Run("MissingNode", func(t *testing.T) { testMissingNode(t, newEtcdCluster(t, ec, 4)) })
	t.Run("Duplicate", func(t *testing.T) { testDuplicate(t, newEtcdCluster(t, ec, 2)) })
	t.Run("FailSpreads", func(t *testing.T) { testFailSpreads(t, newEtcdCluster(t, ec, 4)) })
	t.Run("Mismatch", func(t *testing.T) {
		c := newEtcdCluster(t, ec, 4)
		c.mutate = func(i int, cfg *Config, m *Member) {
			if i == 2 {
				m.LocalWorkers = 8
			}
		}
		c.start(context.Background(), nil)
		for i := range c.errs {
			e := mismatchErr(t, c.errs[i], "workers per node")
			if odd := e.Odd(); len(odd) != 1 || odd[0].Host != "node-2" {
				t.Fatalf("node %d: %v does not name node-2 alone", i, e)
			}
		}
	})
	t.Run("NodeProcessKilled", func(t *testing.T) {
		c := newEtcdCluster(t, ec, 3)
		c.hb = lossHeartbeat // a lease of 5 s: what the test waits for
		c.mutate = func(i int, cfg *Config, m *Member) { m.Rank = i; m.RunID = "run" }
		ctx := context.Background()
		cmd, lines := startNodeProcess(t, BackendEtcd, c.endpoint, 3, 1, c.hb, "RDZV_TEST_PREFIX="+c.prefix)
		c.start(ctx, []int{0, 2})
		for _, i := range []int{0, 2} {
			if c.errs[i] != nil {
				t.Fatalf("node %d: %v", i, c.errs[i])
			}
		}
		waitLine(t, lines, "joined 1")
		killedAt := time.Now()
		killed(t, cmd)
		for _, i := range []int{0, 2} {
			f := waitFailure(t, c.sess[i])
			if !f.Lost || f.Node.Rank != 1 || f.Node.Host != "node-1" {
				t.Fatalf("node %d heard %+v, want node rank 1 lost", i, f)
			}
		}
		t.Logf("lease expiry noticed after %s", time.Since(killedAt))
		if e := lostErr(t, c.sess[0].Barrier(ctx, "after")); e.Node.Rank != 1 || e.Node.Host != "node-1" || e.Generation != 0 {
			t.Fatalf("barrier after the loss: %v, want node rank 1 (node-1) lost in generation 0", e)
		}
	})
	t.Run("NodeStalled", func(t *testing.T) { testNodeStalled(t, newEtcdCluster(t, ec, 3)) })
	t.Run("JoinCancelled", func(t *testing.T) {
		c := newEtcdCluster(t, ec, 2)
		testJoinCancelled(t, Config{Backend: BackendEtcd, Endpoint: c.endpoint, NNodes: 2, NodeRank: -1, Timeout: never(),
			Heartbeat: c.hb, RunID: "cancel", Conf: map[string]string{"prefix": c.prefix}})
	})
	t.Run("Elastic/LastCall", func(t *testing.T) { testElasticLastCall(t, newEtcdCluster(t, ec, 3)) })
	t.Run("Elastic/FullAtOnce", func(t *testing.T) { testElasticFull(t, newEtcdCluster(t, ec, 3)) })
	t.Run("Elastic/TooFew", func(t *testing.T) { testElasticTooFew(t, newEtcdCluster(t, ec, 3)) })
	t.Run("Elastic/NodeLostAndBack", func(t *testing.T) {
		c := newEtcdCluster(t, ec, 3)
		c.hb = lossHeartbeat
		testNodeLostAndBack(t, c, "RDZV_TEST_PREFIX="+c.prefix)
	})
	t.Run("MemberStopped", func(t *testing.T) {
		// a 3-member cluster loses its leader to a crash: the nodes carry on through the others, across the
		// election that follows
		c := newEtcdCluster(t, ec, 3) // the default heartbeat: leases outlive a leader election and the fail-over
		ctx := context.Background()
		c.start(ctx, nil)
		c.mustJoin()
		leader := ec.Leader()
		if leader < 0 {
			t.Fatal("the etcd cluster has no leader")
		}
		ec.KillMember(leader)
		defer ec.RestartMember(leader)
		barrierAll(t, c, "after-member-stop")
	})
	t.Run("QuorumLostAndBack", func(t *testing.T) {
		// two of three members crash: no quorum, no leader. The members left cancel the nodes' watches ("no
		// leader") and refuse their writes until a member is back; the nodes ride it out and pass a barrier then.
		// (Their leases' TTL outlasts the outage: this is about the watch and the requests.)
		c := newEtcdCluster(t, ec, 3)
		c.hb = never()
		core, logs := observer.New(zapcore.InfoLevel)
		c.mutate = func(i int, cfg *Config, m *Member) { cfg.Logger = zap.New(core) }
		ctx := context.Background()
		c.start(ctx, nil)
		c.mustJoin()
		ec.KillMember(1)
		ec.KillMember(2)
		barrier := make(chan error, len(c.sess))
		for _, s := range c.sess {
			go func() { barrier <- s.Barrier(ctx, "after-quorum-loss") }()
		}
		// The event: every node's watch was cancelled for want of a leader (and resumed), or a barrier gave up.
		testutil.WaitFor(t, "the nodes' watches cancelled for want of a leader", func() error {
			if len(barrier) > 0 {
				err := <-barrier
				t.Fatalf("a barrier ended while etcd had no quorum: %v", err)
			}
			resumed := map[any]bool{}
			for _, e := range logs.FilterMessageSnippet("etcd watch cancelled").All() {
				resumed[e.ContextMap()["instance"]] = true
			}
			if len(resumed) < len(c.sess) {
				return fmt.Errorf("%d of %d nodes' watches", len(resumed), len(c.sess))
			}
			return nil
		})
		ec.RestartMember(1)
		defer ec.RestartMember(2)
		for range c.sess {
			if err := testutil.Done(t, "the barrier after the quorum came back", barrier); err != nil {
				t.Fatalf("barrier after the quorum came back: %v", err)
			}
		}
	})
}

// barrierAll passes a barrier on every session of c, within the deadline.
func barrierAll(t *testing.T, c *cluster, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline())
	defer cancel()
	var wg sync.WaitGroup
	for i, s := range c.sess {
		wg.Go(func() {
			if err := s.Barrier(ctx, name); err != nil {
				t.Errorf("node %d: barrier %s: %v", i, name, err)
			}
		})
	}
	wg.Wait()
}
