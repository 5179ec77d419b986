package rendezvous

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tpurun/internal/testutil"
)

// startNodeProcess re-executes the test binary as one node (see childNode) and waits until it has joined.
// joined reports the line it printed; the process is killed and reaped at cleanup.
func startNodeProcess(t *testing.T, backend, endpoint string, nnodes, rank int, hb time.Duration, env ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := testutil.Command("rdzvnode:" + backend)
	cmd.Env = append(cmd.Env, "RDZV_TEST_ENDPOINT="+endpoint,
		fmt.Sprintf("RDZV_TEST_NNODES=%d", nnodes), fmt.Sprintf("RDZV_TEST_RANK=%d", rank),
		"RDZV_TEST_HOST="+hostName(rank), "RDZV_TEST_HB="+hb.String())
	cmd.Env = append(cmd.Env, env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, lines
}

// waitLine waits for the node process's next line and requires it to start with prefix.
func waitLine(t *testing.T, lines <-chan string, prefix string) {
	t.Helper()
	if l := testutil.Done(t, fmt.Sprintf("the node process to print %q", prefix), lines); !strings.HasPrefix(l, prefix) {
		t.Fatalf("node process said %q, want %q", l, prefix)
	}
}

// killed asserts that the process is gone (reaped) after SIGKILL.
func killed(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if err := syscall.Kill(cmd.Process.Pid, 0); err != syscall.ESRCH {
		t.Fatalf("pid %d still exists after SIGKILL: %v", cmd.Process.Pid, err)
	}
}

// A node whose launcher is SIGKILLed is reported lost to every other node, named, within the heartbeat.
func TestNodeProcessKilled(t *testing.T) {
	for _, b := range embedded {
		t.Run(b, func(t *testing.T) {
			// A killed launcher's connection drops at once: a heartbeat past the deadline proves it is that,
			// and no loaded machine makes a live node miss it.
			hb := never()
			c := newCluster(t, b, 4)
			c.hb = hb
			c.mutate = func(i int, cfg *Config, m *Member) {
				m.Rank = i
				m.Accelerator = "v4-32"
				m.LocalWorkers = 4
				m.RunID = "run"
			}
			ctx := context.Background()
			cmd, lines := startNodeProcess(t, b, c.endpoint, 4, 1, hb)
			c.start(ctx, []int{0, 2, 3})
			for _, i := range []int{0, 2, 3} {
				if c.errs[i] != nil {
					t.Fatalf("node %d: %v", i, c.errs[i])
				}
			}
			waitLine(t, lines, "joined 1")
			killed(t, cmd)
			for _, i := range []int{0, 2, 3} {
				f := waitFailure(t, c.sess[i])
				if !f.Lost || f.Node.Rank != 1 || f.Node.Host != "node-1" {
					t.Fatalf("node %d heard %+v, want node rank 1 (node-1) lost", i, f)
				}
			}
			if e := lostErr(t, c.sess[0].Barrier(ctx, "after")); e.Node.Rank != 1 || e.Node.Host != "node-1" || e.Generation != 0 {
				t.Fatalf("barrier after the loss: %v, want node rank 1 (node-1) lost in generation 0", e)
			}
		})
	}
}

// Node 0 (the server) SIGKILLed: the other nodes get an error, not a hang.
func TestServerProcessKilled(t *testing.T) {
	for _, b := range embedded {
		t.Run(b, func(t *testing.T) {
			hb := never() // the server's connections drop at once; a barrier that waited for the timeout would be ErrTimeout
			c := newCluster(t, b, 3)
			c.hb = hb
			c.mutate = func(i int, cfg *Config, m *Member) {
				m.Rank = i
				m.RunID = "run"
				cfg.Conf = map[string]string{}
				if b == BackendTCP {
					cfg.Conf["is_host"] = "false"
				}
			}
			ctx := context.Background()
			cmd, lines := startNodeProcess(t, b, c.endpoint, 3, 0, hb)
			c.start(ctx, []int{1, 2})
			for _, i := range []int{1, 2} {
				if c.errs[i] != nil {
					t.Fatalf("node %d: %v", i, c.errs[i])
				}
			}
			waitLine(t, lines, "joined 0")
			killed(t, cmd)
			for _, i := range []int{1, 2} {
				err := c.sess[i].Barrier(ctx, "after")
				rdzvErr(t, err, ErrServerLost)
				f := waitFailure(t, c.sess[i])
				if !f.Lost || f.Node.Rank != 0 {
					t.Fatalf("node %d heard %+v", i, f)
				}
			}
		})
	}
}

// A node whose launcher freezes (SIGSTOP: connection open, no heartbeats) is reported lost after the heartbeat.
func TestNodeProcessFrozen(t *testing.T) {
	// A frozen launcher is noticed by its silence alone, with the default heartbeat (a live node in this loaded
	// process does not miss it), not before half of it.
	hb := DefaultHeartbeat
	c := newCluster(t, BackendTCP, 2)
	c.hb = hb
	c.mutate = func(i int, cfg *Config, m *Member) { m.Rank = i; m.RunID = "run" }
	ctx := context.Background()
	cmd, lines := startNodeProcess(t, BackendTCP, c.endpoint, 2, 1, hb)
	c.start(ctx, []int{0})
	if c.errs[0] != nil {
		t.Fatal(c.errs[0])
	}
	waitLine(t, lines, "joined 1")
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	f := waitFailure(t, c.sess[0])
	if !f.Lost || f.Node.Rank != 1 || f.Node.Host != "node-1" {
		t.Fatalf("heard %+v, want node 1 lost", f)
	}
	if el := time.Since(stopped); el < hb/2 {
		t.Fatalf("frozen node reported after %s, before the heartbeat %s", el, hb)
	}
	killed(t, cmd)
}

// TestServerProcessStalled: a server whose process stops for longer than a heartbeat (SIGSTOP, as a long garbage
// collection or a loaded host stalls it) and then runs again is not declared lost by its nodes, nor does it declare
// them lost: they pass a barrier after it resumes. A server that stays stopped (a host gone: no connection drops)
// is declared lost by every node, within two heartbeats of silence.
func TestServerProcessStalled(t *testing.T) {
	hb := testutil.Scaled(2 * time.Second)
	srv := startServerProcess(t, "s3cret-token", "RDZV_TEST_HB="+hb.String())
	ctx := context.Background()
	sess := make([]Session, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range sess {
		r, err := New(ctx, Config{Backend: BackendTCP, Endpoint: srv.addr, NNodes: 2, NodeRank: i, Token: "s3cret-token",
			Timeout: never(), Heartbeat: hb, Conf: map[string]string{"is_host": "false"}})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		wg.Go(func() {
			if sess[i], errs[i] = r.Join(ctx, Member{Host: hostName(i), Addr: "127.0.0.1", LocalWorkers: 1, Accelerator: "cpu", Rank: i}); errs[i] == nil {
				errs[i] = sess[i].Barrier(ctx, "before")
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		defer sess[i].Close()
	}
	if err := syscall.Kill(srv.pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// the case under test: a stall of a heartbeat and a quarter, longer than the heartbeat that loses a node and
	// shorter than the two that lose the server (whose last pong may have come a third of a heartbeat before)
	time.Sleep(hb * 5 / 4)
	if err := syscall.Kill(srv.pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for i := range sess {
		wg.Go(func() { errs[i] = sess[i].Barrier(ctx, "after") })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d, barrier after the server's stall: %v", i, err)
		}
	}
	if err := syscall.Kill(srv.pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	for i := range sess {
		if f := waitFailure(t, sess[i]); !f.Lost || !f.Store {
			t.Fatalf("node %d heard %+v, want the server lost", i, f)
		}
		rdzvErr(t, sess[i].Err(), ErrStoreLost)
	}
	if el := time.Since(stopped); el < hb {
		t.Fatalf("a stopped server was declared lost after %s, within the heartbeat %s", el, hb)
	}
	syscall.Kill(srv.pid, syscall.SIGCONT) // so that its cleanup can end it
}
