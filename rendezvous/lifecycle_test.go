package rendezvous_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"tpurun/internal/failure"
	"tpurun/internal/testutil"
	"tpurun/internal/testutil/etcdtest"
	"tpurun/internal/testutil/rdzvtest"
	"tpurun/rendezvous"
	"tpurun/rendezvous/etcd"
	"tpurun/rendezvous/tcp"
)

// The job's lifecycle (doc.go): forming -> running (generation g) -> closing -> closed, the same on the embedded
// server and on etcd (etcd_test.go runs these against a real etcd cluster).

func TestLifecycle(t *testing.T) {
	t.Parallel()
	t.Run("SizeMismatch/Fixed", func(t *testing.T) {
		testSizeMismatch(t, rdzvtest.NewCluster(t, tcp.Name, 2), [2]int{0, 0}, [2]int{2, 3})
	})
	t.Run("SizeMismatch/Elastic", func(t *testing.T) {
		testSizeMismatch(t, rdzvtest.NewCluster(t, tcp.Name, 2), [2]int{2, 2}, [2]int{3, 4})
	})
	t.Run("LateNodeLearnsClosed", func(t *testing.T) { testLateNodeLearnsClosed(t, rdzvtest.NewCluster(t, tcp.Name, 3)) })
}

// TestEtcdLifecycle runs the lifecycle's scenarios against a real etcd (one member).
func TestEtcdLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("etcd: not in -short")
	}
	ec := etcdtest.Start(t, 1) // heavy: takes the slot for the whole test
	t.Run("SizeMismatch/Fixed", func(t *testing.T) { testSizeMismatch(t, newEtcdCluster(t, ec, 2), [2]int{0, 0}, [2]int{2, 3}) })
	t.Run("SizeMismatch/Elastic", func(t *testing.T) { testSizeMismatch(t, newEtcdCluster(t, ec, 2), [2]int{2, 2}, [2]int{3, 4}) })
	t.Run("LateNodeLearnsClosed", func(t *testing.T) { testLateNodeLearnsClosed(t, newEtcdCluster(t, ec, 3)) })
	t.Run("ReusedRunID", func(t *testing.T) { testReusedRunID(t, ec) })
}

// testSizeMismatch: two nodes asking for different world sizes (minimum and most nodes) both fail at once (the
// join timeout is past the test's deadline) with a *MismatchError naming both sizes and the node that gave each.
func testSizeMismatch(t *testing.T, c *rdzvtest.Cluster, mins, maxs [2]int) {
	c.Mutate = func(i int, cfg *rendezvous.Config, m *rendezvous.Member) { cfg.MinNodes, cfg.NNodes = mins[i], maxs[i] }
	c.Start(context.Background(), nil)
	size := func(i int) string { // as a message says it: "3", or "2..4" when elastic
		if mins[i] == 0 {
			return fmt.Sprint(maxs[i])
		}
		return fmt.Sprintf("%d..%d", mins[i], maxs[i])
	}
	want := [2]string{size(0), size(1)}
	for i, err := range c.Errs {
		e := rdzvtest.MismatchErr(t, err, failure.RendezvousNodes.Word())
		got := map[string]string{}
		for _, v := range e.Values {
			for _, n := range v.Nodes {
				got[n.Host] = v.Value
			}
		}
		if len(e.Values) != 2 || got["node-0"] != want[0] || got["node-1"] != want[1] {
			t.Fatalf("node %d: %v, want node-0's %s and node-1's %s", i, e, want[0], want[1])
		}
	}
}

// waitWaiting waits until s's world sees n nodes waiting for the next generation.
func waitWaiting(t *testing.T, s rendezvous.Session, n int) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("%d nodes to wait for the next generation", n), func() bool {
		w, err := s.Waiting(context.Background())
		return err == nil && w == n
	})
}

// closedErr asserts err is the *JobClosedError of generation gen with exit code code.
func closedErr(t *testing.T, err error, gen, code int) {
	t.Helper()
	var e *rendezvous.JobClosedError
	if !errors.As(err, &e) || !errors.Is(err, rendezvous.ErrJobClosed) || e.RunID != "run" || e.Generation != gen || e.ExitCode != code {
		t.Fatalf("%T %v, want job run already finished (generation %d, exit %d)", err, err, gen, code)
	}
}

// testLateNodeLearnsClosed: an elastic world of 2..3 starts with two nodes; a third arrives late and waits in the
// next generation. The world ends (Finish, by every node: the first records it): the waiting node learns at once
// that the job closed, with its generation and code; so does a node that arrives afterwards; and the final world
// still completes its own calls while it closes.
func testLateNodeLearnsClosed(t *testing.T, c *rdzvtest.Cluster) {
	ctx := context.Background()
	c.Mutate = func(i int, cfg *rendezvous.Config, m *rendezvous.Member) {
		cfg.MinNodes, cfg.LastCall = 2, 300*time.Millisecond
		m.RunID = "run"
	}
	c.Start(ctx, []int{0, 1})
	c.MustJoin()
	late := c.LateNode(ctx, 2)
	waitWaiting(t, c.Sess[0], 1)
	if err := c.Sess[0].Finish(ctx, 0); err != nil {
		t.Fatal(err)
	}
	closedErr(t, testutil.Done(t, "the waiting node to learn that the job closed", late), 0, 0)
	if err := c.Sess[1].Finish(ctx, 1); err != nil { // the second close finds the first recorded
		t.Fatal(err)
	}
	closedErr(t, testutil.Done(t, "an arrival after the close to learn it", c.LateNode(ctx, 2)), 0, 0)
	errs := make(chan error, 2)
	for _, s := range c.Sess[:2] {
		go func() { errs <- s.Barrier(ctx, "closing") }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("the closing world's barrier: %v", err)
		}
	}
}

// testReusedRunID (etcd): job A ends; a node that arrives while A's nodes are still there learns A closed; once
// they let go, A's keys vanish (linger) and job B with the same run id starts at generation 0; a late node of A
// that arrives after B began is B's: it waits in B's next generation and learns when B closes.
func testReusedRunID(t *testing.T, ec *etcdtest.Cluster) {
	ctx := context.Background()
	a := newEtcdCluster(t, ec, 2)
	a.HB = time.Second // the job's lease lives linger, two heartbeats at least
	a.Mutate = func(i int, cfg *rendezvous.Config, m *rendezvous.Member) {
		cfg.Conf["linger"] = "1"
		m.RunID = "run"
	}
	a.Start(ctx, nil)
	a.MustJoin()
	if err := a.Sess[0].Finish(ctx, 3); err != nil {
		t.Fatal(err)
	}
	closedErr(t, testutil.Done(t, "an arrival while A's nodes are there to learn A closed", a.LateNode(ctx, 1)), 0, 3)
	a.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: ec.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	testutil.Eventually(t, "job A's keys to vanish once its nodes are done", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		r, err := cli.Get(cctx, a.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && r.Count == 0
	})

	b := newEtcdCluster(t, ec, 2)
	b.Prefix = a.Prefix
	b.Mutate = func(i int, cfg *rendezvous.Config, m *rendezvous.Member) {
		a.Mutate(i, cfg, m)
		m.Generation = rendezvous.LatestGeneration
	}
	b.Start(ctx, nil)
	b.MustJoin()
	rdzvtest.AgreeOn(t, b.Sess, 0, "node-0", "node-1")
	late := b.LateNode(ctx, 0)
	waitWaiting(t, b.Sess[0], 1)
	if err := b.Sess[1].Finish(ctx, 0); err != nil {
		t.Fatal(err)
	}
	closedErr(t, testutil.Done(t, "the late node of A, waiting in B, to learn B closed", late), 0, 0)
}

// TestEtcdProcessKilled: etcd (a process of its own) is SIGKILLed under a running world and a node waiting for
// the next generation: every session ends (Done) within a few heartbeats with an ErrStoreLost error naming the
// endpoint, a barrier returns it at once, the waiting join returns it, and Failures reports it.
func TestEtcdProcessKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("etcd process: not in -short")
	}
	ep, proc := etcdtest.StartProcess(t)
	c := rdzvtest.NewCluster(t, etcd.Name, 2)
	c.Endpoint, c.Prefix, c.HB = ep, "/test/killed/", 2*time.Second
	c.Mutate = func(i int, cfg *rendezvous.Config, m *rendezvous.Member) {
		cfg.MinNodes, cfg.NNodes = 2, 3
		cfg.LastCall = 200 * time.Millisecond
	}
	ctx := context.Background()
	c.Start(ctx, nil)
	c.MustJoin()
	late := c.LateNode(ctx, 2)
	waitWaiting(t, c.Sess[0], 1)
	if err := proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	lost := func(what string, err error) {
		t.Helper()
		e := rdzvtest.RdzvErr(t, err, rendezvous.ErrStoreLost)
		if e.Field != string(failure.RendezvousEndpoint) || e.Value != ep {
			t.Fatalf("%s: %v does not name the endpoint %s", what, e, ep)
		}
	}
	for i, s := range c.Sess {
		testutil.Done(t, fmt.Sprintf("node %d's session to end", i), s.Done())
		lost("Err", s.Err())
		lost("Barrier", s.Barrier(ctx, "after"))
		if f := rdzvtest.WaitFailure(t, s); !f.Lost || f.Node.Host != ep {
			t.Fatalf("node %d heard %+v, want etcd at %s lost", i, f, ep)
		}
	}
	lost("the waiting join", testutil.Done(t, "the waiting join to end", late))
	t.Logf("etcd's death noticed after %s (heartbeat %s)", time.Since(killed).Round(time.Millisecond), c.HB)
}
