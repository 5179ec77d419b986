package rendezvous_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/etcdtest"
	"tpurun/internal/testutil/rdzvtest"
	"tpurun/rendezvous"
	"tpurun/rendezvous/etcd"
)

// newEtcdCluster is a cluster of rendezvous nodes on etcd, with a key prefix of its own.
func newEtcdCluster(t *testing.T, ec *etcdtest.Cluster, n int) *rdzvtest.Cluster {
	return rdzvtest.NewEtcdCluster(t, etcd.Name, ec.Endpoint(), n)
}

// lossHeartbeat is the heartbeat of the etcd tests that wait for a dead node's lease to run out: a lease lives two
// heartbeats, so half the default keeps that wait at the default heartbeat (5 s), renewed as often as before.
const lossHeartbeat = rendezvous.DefaultHeartbeat / 2

// TestEtcd runs the multi-node scenarios against one real 3-member etcd cluster (the etcd package's TestEtcdForming
// those of its own making: chunks, the counting node, departures, a stalled node).
func TestEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("etcd cluster: not in -short")
	}
	ec := etcdtest.Start(t, 3) // heavy: takes the slot for the whole test
	// The scenarios up to MemberStopped are independent (each its own key prefix) and mostly wait (leases, last
	// calls): they run in parallel once the two that stop members (run first, each restoring the cluster) are done.
	for _, n := range []int{2, 4, 8} {
		t.Run(fmt.Sprintf("AgreedWorld/%d", n), func(t *testing.T) {
			t.Parallel()
			rdzvtest.AgreedWorld(t, newEtcdCluster(t, ec, n))
		})
	}
	t.Run("MissingNode", func(t *testing.T) {
		t.Parallel()
		testMissingNode(t, newEtcdCluster(t, ec, 4))
	})
	t.Run("Duplicate", func(t *testing.T) {
		t.Parallel()
		testDuplicate(t, newEtcdCluster(t, ec, 2))
	})
	t.Run("FailSpreads", func(t *testing.T) {
		t.Parallel()
		testFailSpreads(t, newEtcdCluster(t, ec, 4))
	})
	t.Run("Mismatch", func(t *testing.T) {
		t.Parallel()
		c := newEtcdCluster(t, ec, 4)
		c.Mutate = func(i int, cfg *rendezvous.Config, m *rendezvous.Member) {
			if i == 2 {
				m.LocalWorkers = 8
			}
		}
		c.Start(context.Background(), nil)
		for i := range c.Errs {
			e := rdzvtest.MismatchErr(t, c.Errs[i], "workers per node")
			if odd := e.Odd(); len(odd) != 1 || odd[0].Host != "node-2" {
				t.Fatalf("node %d: %v does not name node-2 alone", i, e)
			}
		}
	})
	t.Run("NodeProcessKilled", func(t *testing.T) {
		t.Parallel()
		c := newEtcdCluster(t, ec, 3)
		c.HB = lossHeartbeat // a lease of 5 s: what the test waits for
		c.Mutate = func(i int, cfg *rendezvous.Config, m *rendezvous.Member) { m.Rank = i; m.RunID = "run" }
		ctx := context.Background()
		cmd, lines := rdzvtest.StartNodeProcess(t, etcd.Name, c.Endpoint, 3, 1, c.HB, "RDZV_TEST_PREFIX="+c.Prefix)
		c.Start(ctx, []int{0, 2})
		for _, i := range []int{0, 2} {
			if c.Errs[i] != nil {
				t.Fatalf("node %d: %v", i, c.Errs[i])
			}
		}
		rdzvtest.WaitLine(t, lines, "joined 1")
		killedAt := time.Now()
		rdzvtest.Killed(t, cmd)
		for _, i := range []int{0, 2} {
			f := rdzvtest.WaitFailure(t, c.Sess[i])
			if !f.Lost || f.Node.Rank != 1 || f.Node.Host != "node-1" {
				t.Fatalf("node %d heard %+v, want node rank 1 lost", i, f)
			}
		}
		t.Logf("lease expiry noticed after %s", time.Since(killedAt))
		if e := rdzvtest.LostErr(t, c.Sess[0].Barrier(ctx, "after")); e.Node.Rank != 1 || e.Node.Host != "node-1" || e.Generation != 0 {
			t.Fatalf("barrier after the loss: %v, want node rank 1 (node-1) lost in generation 0", e)
		}
	})
	t.Run("JoinCancelled", func(t *testing.T) {
		t.Parallel()
		c := newEtcdCluster(t, ec, 2)
		testJoinCancelled(t, rendezvous.Config{Backend: etcd.Name, Endpoint: c.Endpoint, NNodes: 2, NodeRank: -1, Timeout: rdzvtest.Never(),
			Heartbeat: c.HB, RunID: "cancel", Conf: map[string]string{"prefix": c.Prefix}})
	})
	t.Run("Elastic/LastCall", func(t *testing.T) {
		t.Parallel()
		testElasticLastCall(t, newEtcdCluster(t, ec, 3))
	})
	t.Run("Elastic/FullAtOnce", func(t *testing.T) {
		t.Parallel()
		testElasticFull(t, newEtcdCluster(t, ec, 3))
	})
	t.Run("Elastic/TooFew", func(t *testing.T) {
		t.Parallel()
		testElasticTooFew(t, newEtcdCluster(t, ec, 3))
	})
	t.Run("Elastic/NodeLostAndBack", func(t *testing.T) {
		t.Parallel()
		c := newEtcdCluster(t, ec, 3)
		c.HB = lossHeartbeat
		testNodeLostAndBack(t, c, "RDZV_TEST_PREFIX="+c.Prefix)
	})
	t.Run("MemberStopped", func(t *testing.T) {
		// a 3-member cluster loses its leader to a crash: the nodes carry on through the others, across the
		// election that follows
		c := newEtcdCluster(t, ec, 3) // the default heartbeat: leases outlive a leader election and the fail-over
		ctx := context.Background()
		c.Start(ctx, nil)
		c.MustJoin()
		leader := ec.Leader()
		if leader < 0 {
			t.Fatal("the etcd cluster has no leader")
		}
		ec.KillMember(leader)
		defer ec.RestartMember(leader)
		rdzvtest.BarrierAll(t, c, "after-member-stop")
	})
	t.Run("QuorumLostAndBack", func(t *testing.T) {
		// two of three members crash: no quorum, no leader. The members left cancel the nodes' watches ("no
		// leader") and refuse their writes until a member is back; the nodes ride it out and pass a barrier then.
		// (Their leases' TTL outlasts the outage: this is about the watch and the requests.)
		c := newEtcdCluster(t, ec, 3)
		c.HB = rdzvtest.Never()
		core, logs := observer.New(zapcore.InfoLevel)
		c.Mutate = func(i int, cfg *rendezvous.Config, m *rendezvous.Member) { cfg.Logger = zap.New(core) }
		ctx := context.Background()
		c.Start(ctx, nil)
		c.MustJoin()
		ec.KillMember(1)
		ec.KillMember(2)
		barrier := make(chan error, len(c.Sess))
		for _, s := range c.Sess {
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
			if len(resumed) < len(c.Sess) {
				return fmt.Errorf("%d of %d nodes' watches", len(resumed), len(c.Sess))
			}
			return nil
		})
		ec.RestartMember(1)
		defer ec.RestartMember(2)
		for range c.Sess {
			if err := testutil.Done(t, "the barrier after the quorum came back", barrier); err != nil {
				t.Fatalf("barrier after the quorum came back: %v", err)
			}
		}
	})
}
