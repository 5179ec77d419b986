package etcd

import (
	"testing"

	"tpurun/internal/testutil/etcdtest"
	"tpurun/internal/testutil/rdzvtest"
)

// newEtcdCluster is a cluster of rendezvous nodes on etcd, with a key prefix of its own.
func newEtcdCluster(t *testing.T, ec *etcdtest.Cluster, n int) *rdzvtest.Cluster {
	return rdzvtest.NewEtcdCluster(t, Name, ec.Endpoint(), n)
}

// TestEtcdForming runs the scenarios of how this backend forms a world (chunks, the counting node, departures, a
// stalled node) against one real 3-member etcd cluster; the rendezvous package's TestEtcd runs the scenarios
// every backend shares.
func TestEtcdForming(t *testing.T) {
	if testing.Short() {
		t.Skip("etcd cluster: not in -short")
	}
	ec := etcdtest.Start(t, 3) // heavy: takes the slot for the whole test
	// Chunked and the counting node's scenarios are independent (each its own key prefix) and run in parallel once
	// the two that cannot share the cluster are done: a compaction (global to etcd) and a stalled node.
	t.Run("AgreedWorld/Chunked", func(t *testing.T) {
		t.Parallel()
		testChunkedWorld(t, newEtcdCluster(t, ec, 8))
	})
	t.Run("CounterGone", func(t *testing.T) {
		t.Parallel()
		testCounterGone(t, newEtcdCluster(t, ec, 3))
	})
	t.Run("CounterRetires", func(t *testing.T) {
		t.Parallel()
		testCounterRetires(t, newEtcdCluster(t, ec, 3))
	})
	t.Run("DeparturesCompacted", func(t *testing.T) { testDeparturesCompacted(t, newEtcdCluster(t, ec, 3)) })
	t.Run("ShareRead", func(t *testing.T) { testShareRead(t, newEtcdCluster(t, ec, 32)) })
	t.Run("NodeStalled", func(t *testing.T) { testNodeStalled(t, newEtcdCluster(t, ec, 3)) })
}
