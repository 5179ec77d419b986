package rendezvous_test

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/rdzvtest"
	"tpurun/rendezvous"
	"tpurun/rendezvous/tcp"
)

// A node whose launcher is SIGKILLed is reported lost to every other node, named, within the heartbeat.
func TestNodeProcessKilled(t *testing.T) {
	for _, b := range embedded {
		t.Run(b, func(t *testing.T) {
			// A killed launcher's connection drops at once: a heartbeat past the deadline proves it is that,
			// and no loaded machine makes a live node miss it.
			hb := rdzvtest.Never()
			c := rdzvtest.NewCluster(t, b, 4)
			c.HB = hb
			c.Mutate = func(i int, cfg *rendezvous.Config, m *rendezvous.Member) {
				m.Rank = i
				m.Accelerator = "v4-32"
				m.LocalWorkers = 4
				m.RunID = "run"
			}
			ctx := context.Background()
			cmd, lines := rdzvtest.StartNodeProcess(t, b, c.Endpoint, 4, 1, hb)
			c.Start(ctx, []int{0, 2, 3})
			for _, i := range []int{0, 2, 3} {
				if c.Errs[i] != nil {
					t.Fatalf("node %d: %v", i, c.Errs[i])
				}
			}
			rdzvtest.WaitLine(t, lines, "joined 1")
			rdzvtest.Killed(t, cmd)
			for _, i := range []int{0, 2, 3} {
				f := rdzvtest.WaitFailure(t, c.Sess[i])
				if !f.Lost || f.Node.Rank != 1 || f.Node.Host != "node-1" {
					t.Fatalf("node %d heard %+v, want node rank 1 (node-1) lost", i, f)
				}
			}
			if e := rdzvtest.LostErr(t, c.Sess[0].Barrier(ctx, "after")); e.Node.Rank != 1 || e.Node.Host != "node-1" || e.Generation != 0 {
				t.Fatalf("barrier after the loss: %v, want node rank 1 (node-1) lost in generation 0", e)
			}
		})
	}
}

// Node 0 (the server) SIGKILLed: the other nodes get an error, not a hang.
func TestServerProcessKilled(t *testing.T) {
	for _, b := range embedded {
		t.Run(b, func(t *testing.T) {
			hb := rdzvtest.Never() // the server's connections drop at once; a barrier that waited for the timeout would be ErrTimeout
			c := rdzvtest.NewCluster(t, b, 3)
			c.HB = hb
			c.Mutate = func(i int, cfg *rendezvous.Config, m *rendezvous.Member) {
				m.Rank = i
				m.RunID = "run"
				cfg.Conf = map[string]string{}
				if b == tcp.Name {
					cfg.Conf["is_host"] = "false"
				}
			}
			ctx := context.Background()
			cmd, lines := rdzvtest.StartNodeProcess(t, b, c.Endpoint, 3, 0, hb)
			c.Start(ctx, []int{1, 2})
			for _, i := range []int{1, 2} {
				if c.Errs[i] != nil {
					t.Fatalf("node %d: %v", i, c.Errs[i])
				}
			}
			rdzvtest.WaitLine(t, lines, "joined 0")
			rdzvtest.Killed(t, cmd)
			for _, i := range []int{1, 2} {
				err := c.Sess[i].Barrier(ctx, "after")
				rdzvtest.RdzvErr(t, err, rendezvous.ErrServerLost)
				f := rdzvtest.WaitFailure(t, c.Sess[i])
				if !f.Lost || f.Node.Rank != 0 {
					t.Fatalf("node %d heard %+v", i, f)
				}
			}
		})
	}
}

// frozenNode forms a world of two with heartbeat hb: node 0 in this process, node 1 a process of its own, which it
// then freezes (SIGSTOP: its connection open, no heartbeats).
func frozenNode(t *testing.T, hb time.Duration) (*rdzvtest.Cluster, *exec.Cmd) {
	t.Helper()
	c := rdzvtest.NewCluster(t, tcp.Name, 2)
	c.HB = hb
	c.Mutate = func(i int, cfg *rendezvous.Config, m *rendezvous.Member) { m.Rank = i; m.RunID = "run" }
	cmd, lines := rdzvtest.StartNodeProcess(t, tcp.Name, c.Endpoint, 2, 1, hb)
	c.Start(context.Background(), []int{0})
	if c.Errs[0] != nil {
		t.Fatal(c.Errs[0])
	}
	rdzvtest.WaitLine(t, lines, "joined 1")
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	return c, cmd
}

// A node whose launcher freezes (SIGSTOP: connection open, no heartbeats) is reported lost after SilentBeats
// heartbeats of silence.
func TestNodeProcessFrozen(t *testing.T) {
	// A frozen launcher is noticed by its silence alone, with the default heartbeat (a live node in this loaded
	// process does not miss it), not before half of it.
	hb := rendezvous.DefaultHeartbeat
	c, cmd := frozenNode(t, hb)
	stopped := time.Now()
	f := rdzvtest.WaitFailure(t, c.Sess[0])
	if !f.Lost || f.Node.Rank != 1 || f.Node.Host != "node-1" {
		t.Fatalf("heard %+v, want node 1 lost", f)
	}
	if el := time.Since(stopped); el < hb/2 {
		t.Fatalf("frozen node reported after %s, before the heartbeat %s", el, hb)
	}
	rdzvtest.Killed(t, cmd)
}

// A node whose launcher is busy (SIGSTOP for two heartbeats: a loaded host, a long garbage collection, thousands of
// joins to serve) past one heartbeat but within the SilentBeats (3) that lose it, is not declared lost: it is
// waited for. Killed afterwards, it is lost then, once, at its connection's drop.
func TestNodeProcessBusy(t *testing.T) {
	hb := testutil.Scaled(2 * time.Second)
	c, cmd := frozenNode(t, hb)
	// The case under test is an absence over a span: no loss declared while the node is silent for two heartbeats.
	// Only that span of time can show it; the loss it must not cause is checked below, at the kill.
	time.Sleep(2 * hb)
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	rdzvtest.Killed(t, cmd)
	f := rdzvtest.WaitFailure(t, c.Sess[0])
	if !f.Lost || f.Node.Rank != 1 {
		t.Fatalf("heard %+v, want node 1 lost once killed", f)
	}
	if f.At.Before(killed) {
		t.Fatalf("node 1 was declared lost %s before it was killed, busy for two heartbeats of %s: %v", killed.Sub(f.At), hb, f)
	}
}
