package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/etcdtest"
)

func init() { testutil.Define(etcdtest.ProcessVerb) } // TestEtcdProcessKilled's etcd

// The job's lifecycle (doc.go): forming -> running (generation g) -> closing -> closed, the same on the embedded
// server and on etcd (etcd_test.go runs these against a real etcd cluster).

func TestLifecycle(t *testing.T) {
	t.Run("SizeMismatch/Fixed", func(t *testing.T) { testSizeMismatch(t, newCluster(t, BackendTCP, 2), [2]int{0, 0}, [2]int{2, 3}) })
	t.Run("SizeMismatch/Elastic", func(t *testing.T) { testSizeMismatch(t, newCluster(t, BackendTCP, 2), [2]int{2, 2}, [2]int{3, 4}) })
	t.Run("LateNodeLearnsClosed", func(t *testing.T) { testLateNodeLearnsClosed(t, newCluster(t, BackendTCP, 3)) })
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
func testSizeMismatch(t *testing.T, c *cluster, mins, maxs [2]int) {
	c.mutate = func(i int, cfg *Config, m *Member) { cfg.MinNodes, cfg.NNodes = mins[i], maxs[i] }
	c.start(context.Background(), nil)
	want := [2]string{sizeRange(mins[0], maxs[0]), sizeRange(mins[1], maxs[1])}
	for i, err := range c.errs {
		e := mismatchErr(t, err, FieldNodes)
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

// lateNode starts a node that joins the latest generation (a late elastic node, a replacement) in the
// background; its join's result comes on the channel.
func (c *cluster) lateNode(ctx context.Context, i int) <-chan error {
	c.t.Helper()
	cfg, m := c.config(i)
	m.Generation = LatestGeneration
	r, err := New(ctx, cfg)
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

// waitWaiting waits until s's world sees n nodes waiting for the next generation.
func waitWaiting(t *testing.T, s Session, n int) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("%d nodes to wait for the next generation", n), func() bool {
		w, err := s.Waiting(context.Background())
		return err == nil && w == n
	})
}

// closedErr asserts err is the *JobClosedError of generation gen with exit code code.
func closedErr(t *testing.T, err error, gen, code int) {
	t.Helper()
	var e *JobClosedError
	if !errors.As(err, &e) || !errors.Is(err, ErrJobClosed) || e.RunID != "run" || e.Generation != gen || e.ExitCode != code {
		t.Fatalf("%T %v, want job run already finished (generation %d, exit %d)", err, err, gen, code)
	}
}

// testLateNodeLearnsClosed: an elastic world of 2..3 starts with two nodes; a third arrives late and waits in the
// next generation. The world ends (Finish, by every node: the first records it): the waiting node learns at once
// that the job closed, with its generation and code; so does a node that arrives afterwards; and the final world
// still completes its own calls while it closes.
func testLateNodeLearnsClosed(t *testing.T, c *cluster) {
	ctx := context.Background()
	c.mutate = func(i int, cfg *Config, m *Member) {
		cfg.MinNodes, cfg.LastCall = 2, 300*time.Millisecond
		m.RunID = "run"
	}
	c.start(ctx, []int{0, 1})
	c.mustJoin()
	late := c.lateNode(ctx, 2)
	waitWaiting(t, c.sess[0], 1)
	if err := c.sess[0].Finish(ctx, 0); err != nil {
		t.Fatal(err)
	}
	closedErr(t, testutil.Done(t, "the waiting node to learn that the job closed", late), 0, 0)
	if err := c.sess[1].Finish(ctx, 1); err != nil { // the second close finds the first recorded
		t.Fatal(err)
	}
	closedErr(t, testutil.Done(t, "an arrival after the close to learn it", c.lateNode(ctx, 2)), 0, 0)
	errs := make(chan error, 2)
	for _, s := range c.sess[:2] {
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
	a.hb = time.Second // the job's lease lives linger, two heartbeats at least
	a.mutate = func(i int, cfg *Config, m *Member) {
		cfg.Conf["linger"] = "1"
		m.RunID = "run"
	}
	a.start(ctx, nil)
	a.mustJoin()
	if err := a.sess[0].Finish(ctx, 3); err != nil {
		t.Fatal(err)
	}
	closedErr(t, testutil.Done(t, "an arrival while A's nodes are there to learn A closed", a.lateNode(ctx, 1)), 0, 3)
	a.close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: ec.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	testutil.Eventually(t, "job A's keys to vanish once its nodes are done", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		r, err := cli.Get(cctx, a.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && r.Count == 0
	})

	b := newEtcdCluster(t, ec, 2)
	b.prefix = a.prefix
	b.mutate = func(i int, cfg *Config, m *Member) {
		a.mutate(i, cfg, m)
		m.Generation = LatestGeneration
	}
	b.start(ctx, nil)
	b.mustJoin()
	agreeOn(t, b.sess, 0, "node-0", "node-1")
	late := b.lateNode(ctx, 0)
	waitWaiting(t, b.sess[0], 1)
	if err := b.sess[1].Finish(ctx, 0); err != nil {
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
	ep, etcd := etcdtest.StartProcess(t)
	c := newCluster(t, BackendEtcd, 2)
	c.endpoint, c.prefix, c.hb = ep, "/test/killed/", 2*time.Second
	c.mutate = func(i int, cfg *Config, m *Member) {
		cfg.MinNodes, cfg.NNodes = 2, 3
		cfg.LastCall = 200 * time.Millisecond
	}
	ctx := context.Background()
	c.start(ctx, nil)
	c.mustJoin()
	late := c.lateNode(ctx, 2)
	waitWaiting(t, c.sess[0], 1)
	if err := etcd.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	lost := func(what string, err error) {
		t.Helper()
		e := rdzvErr(t, err, ErrStoreLost)
		if e.Field != FieldEndpoint || e.Value != ep {
			t.Fatalf("%s: %v does not name the endpoint %s", what, e, ep)
		}
	}
	for i, s := range c.sess {
		testutil.Done(t, fmt.Sprintf("node %d's session to end", i), s.Done())
		lost("Err", s.Err())
		lost("Barrier", s.Barrier(ctx, "after"))
		if f := waitFailure(t, s); !f.Lost || f.Node.Host != ep {
			t.Fatalf("node %d heard %+v, want etcd at %s lost", i, f, ep)
		}
	}
	lost("the waiting join", testutil.Done(t, "the waiting join to end", late))
	t.Logf("etcd's death noticed after %s (heartbeat %s)", time.Since(killed).Round(time.Millisecond), c.hb)
}
