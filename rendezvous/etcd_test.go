package rendezvous

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"tpurun/launcher/launchertest"
	"tpurun/rendezvous/etcdtest"
)

// newEtcdCluster is a cluster of rendezvous nodes on etcd, with a key prefix of its own.
func newEtcdCluster(t *testing.T, ec *etcdtest.Cluster, n int) *cluster {
	c := newCluster(t, BackendEtcd, n)
	c.endpoint = ec.Endpoint()
	c.prefix = "/test/" + t.Name() + "/"
	return c
}

// TestEtcd runs the multi-node scenarios against one real 3-member etcd cluster.
func TestEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("etcd cluster: not in -short")
	}
	ec := etcdtest.Start(t, 3) // heavy: takes the slot for the whole test
	for _, n := range []int{2, 4, 8} {
		t.Run(fmt.Sprintf("AgreedWorld/%d", n), func(t *testing.T) { testAgreedWorld(t, newEtcdCluster(t, ec, n)) })
	}
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
			e := rdzvErr(t, c.errs[i], ErrMismatch)
			if len(e.Nodes) != 1 || e.Nodes[0].Host != "node-2" {
				t.Fatalf("node %d: %v does not name node-2 alone", i, e)
			}
		}
	})
	t.Run("NodeProcessKilled", func(t *testing.T) {
		c := newEtcdCluster(t, ec, 3)
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
		testNodeLostAndBack(t, c, "RDZV_TEST_PREFIX="+c.prefix)
	})
	t.Run("MemberStopped", func(t *testing.T) {
		// a 3-member cluster loses one member: the nodes carry on through the others
		c := newEtcdCluster(t, ec, 3) // the default heartbeat: leases outlive a leader election and the fail-over
		ctx := context.Background()
		c.start(ctx, nil)
		c.mustJoin()
		ec.StopMember(2) // maybe the leader: the barrier runs through the election that follows
		ctx, cancel := context.WithTimeout(ctx, launchertest.Deadline())
		defer cancel()
		var wg sync.WaitGroup
		for i, s := range c.sess {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.Barrier(ctx, "after-member-stop"); err != nil {
					t.Errorf("node %d: barrier with one etcd member down: %v", i, err)
				}
			}()
		}
		wg.Wait()
	})
}
