package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/etcdtest"
	"tpurun/internal/testutil/rdzvtest"
	"tpurun/rendezvous"
)

// A node, or an etcd, that is busy for longer than a heartbeat (a loaded host, a GC pause) is not lost: the node's
// lease lives two heartbeats, and a renewal answered late makes nothing lost. Each test stops a process (SIGSTOP)
// for 1.1 heartbeats right after its lease was renewed (the stop is the case under test), lets it go on, and waits
// for the event that proves it lived through: the lease renewed again.

// stallHeartbeat is the heartbeat of the stall tests: long enough that a process let go after 1.1 of it renews
// its lease before the rest of the TTL runs out, on a loaded machine.
const stallHeartbeat = 2 * time.Second

// etcdClient is a client of the etcd at endpoint, closed at cleanup.
func etcdClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(endpoint, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// leaseOf is the lease of the registration of host in generation 0 of c's run (<prefix><run id>/<job>/0/members/).
func leaseOf(t *testing.T, cli *clientv3.Client, c *rdzvtest.Cluster, runID, host string) clientv3.LeaseID {
	t.Helper()
	r, err := cli.Get(context.Background(), c.Prefix+runID+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range r.Kvs {
		var reg etcdRegistration
		if strings.Contains(string(kv.Key), "/0/members/") && json.Unmarshal(kv.Value, &reg) == nil && reg.Host == host {
			return clientv3.LeaseID(kv.Lease)
		}
	}
	t.Fatalf("no registration of %s under %s", host, c.Prefix)
	return 0
}

// waitRenewed waits until each lease was renewed within the last second (etcd gives the seconds left, rounded
// down: a TTL less one); a lease gone fails the test.
func waitRenewed(t *testing.T, cli *clientv3.Client, what string, leases ...clientv3.LeaseID) {
	t.Helper()
	full := int64(nodeTTL(stallHeartbeat).Seconds()) - 1
	testutil.WaitFor(t, what, func() error {
		for _, l := range leases {
			r, err := cli.TimeToLive(context.Background(), l)
			if err != nil {
				return err
			}
			if r.TTL <= 0 {
				t.Fatalf("%s: lease %x expired", what, int64(l))
			}
			if r.TTL < full {
				return fmt.Errorf("lease %x: %d s left of %d", int64(l), r.TTL, full)
			}
		}
		return nil
	})
}

// waitRenewal waits for a renewal of the first lease, seen as its time to live rising to a TTL less one (a
// renewal just done: the stall that follows has all of the lease's TTL but a poll's time), with the others
// renewed within the last heartbeat then (each node renews on its own beat: two nodes that joined a second or more
// apart are never both within the last second, which a loaded machine made a failure of this wait; a stall of 1.1
// heartbeats then still leaves them most of a heartbeat of their TTL).
func waitRenewal(t *testing.T, cli *clientv3.Client, what string, leases ...clientv3.LeaseID) {
	t.Helper()
	full := int64(nodeTTL(stallHeartbeat).Seconds()) - 1
	ttl := func(l clientv3.LeaseID) int64 {
		r, err := cli.TimeToLive(context.Background(), l)
		if err != nil || r.TTL <= 0 {
			t.Fatalf("%s: lease %x: %v, TTL %v", what, int64(l), err, r)
		}
		return r.TTL
	}
	testutil.WaitFor(t, what, func() error {
		if ttl(leases[0]) >= full {
			return fmt.Errorf("lease %x renewed less than a second ago: waiting for its next renewal", int64(leases[0]))
		}
		testutil.WaitFor(t, what, func() error {
			if left := ttl(leases[0]); left < full {
				return fmt.Errorf("lease %x: %d s left of %d", int64(leases[0]), left, full)
			}
			return nil
		})
		for _, l := range leases[1:] {
			if left := ttl(l); left < full-1 { // renewed within the last heartbeat (TTL: 3 heartbeats)
				return fmt.Errorf("lease %x: %d s left of %d", int64(l), left, full)
			}
		}
		return nil
	})
}

// stall stops p for 1.1 heartbeats right after leases were renewed, and waits until they are renewed again.
func stall(t *testing.T, cli *clientv3.Client, p *os.Process, what string, leases ...clientv3.LeaseID) {
	t.Helper()
	waitRenewal(t, cli, "the leases renewed before "+what+" stops", leases...)
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(stallHeartbeat * 11 / 10) // the case under test: busy for longer than a heartbeat
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitRenewed(t, cli, "the leases renewed after "+what+" went on", leases...)
}

// noFailure asserts that none of sess heard of a failure, or lost etcd.
func noFailure(t *testing.T, sess ...rendezvous.Session) {
	t.Helper()
	for i, s := range sess {
		select {
		case f := <-s.Failures():
			t.Fatalf("session %d heard %v", i, f)
		default:
		}
		if err := s.Err(); err != nil {
			t.Fatalf("session %d ended: %v", i, err)
		}
	}
}

// testNodeStalled: a node's launcher process stops for longer than a heartbeat: the others do not hear it lost.
func testNodeStalled(t *testing.T, c *rdzvtest.Cluster) {
	c.HB = stallHeartbeat
	c.Mutate = func(i int, cfg *rendezvous.Config, m *rendezvous.Member) { m.Rank = i; m.RunID = "run" }
	cmd, lines := rdzvtest.StartNodeProcess(t, Name, c.Endpoint, 3, 1, c.HB, "RDZV_TEST_PREFIX="+c.Prefix)
	c.Start(context.Background(), []int{0, 2})
	for _, i := range []int{0, 2} {
		if c.Errs[i] != nil {
			t.Fatalf("node %d: %v", i, c.Errs[i])
		}
	}
	rdzvtest.WaitLine(t, lines, "joined 1")
	cli := etcdClient(t, c.Endpoint)
	stall(t, cli, cmd.Process, "node-1's launcher", leaseOf(t, cli, c, "run", "node-1"))
	noFailure(t, c.Sess[0], c.Sess[2])
}

// TestEtcdProcessStalled: etcd (a process of its own) stops for longer than a heartbeat under a running world:
// no node takes it for lost, nor loses another, and the world passes a barrier afterwards.
func TestEtcdProcessStalled(t *testing.T) {
	if testing.Short() {
		t.Skip("etcd process: not in -short")
	}
	ep, etcd := etcdtest.StartProcess(t)
	c := rdzvtest.NewCluster(t, Name, 2)
	c.Endpoint, c.Prefix, c.HB = ep, "/test/stalled/", stallHeartbeat
	ctx := context.Background()
	c.Start(ctx, nil)
	c.MustJoin()
	cli := etcdClient(t, ep)
	stall(t, cli, etcd, "etcd", leaseOf(t, cli, c, "run-1", "node-0"), leaseOf(t, cli, c, "run-1", "node-1"))
	noFailure(t, c.Sess...)
	rdzvtest.BarrierAll(t, c, "after-the-stall")
	noFailure(t, c.Sess...)
}
