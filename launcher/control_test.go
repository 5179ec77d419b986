package launcher_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"tpurun/internal/failure"
	"tpurun/internal/testutil"
	"tpurun/internal/testutil/etcdtest"
	"tpurun/launcher"
)

// TestRunStopsWhileWaitingForTheOtherNodes: node 0's workers are done and node 0 waits for node 1's outcome (node
// 1's workers hang); SIGTERM to node 0 ends that wait at once: node 0 exits 143 and tells node 1, which stops too.
// Also when the etcd server has died meanwhile. Node 0 swallowed SIGTERM there: it exited 0 when the others
// finished, and with a dead etcd it hung for the whole exitBarrierTimeout (5 minutes), deaf.
func TestRunStopsWhileWaitingForTheOtherNodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		backend   string
		killStore bool
	}{{"tcp", false}, {"etcd", false}, {"etcd", true}} {
		name := tc.backend
		if tc.killStore {
			name += "-dead"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, 2, "tcp", "exit:0", testutil.FakeRank(2, "hang"), testutil.FakeRank(3, "hang"))
			stopStore := func() {}
			if tc.backend == "etcd" {
				c := etcdtest.Start(t, 1) // one this test can stop: a store that dies mid-run
				stopStore = func() { c.StopMember(0) }
				for i := range w.specs {
					w.specs[i].Rendezvous.Backend, w.specs[i].Rendezvous.Endpoint = "etcd", c.Endpoint()
					w.specs[i].Rendezvous.Conf = nil
				}
			}
			errs := make([]chan error, 2)
			for i := range w.specs {
				errs[i] = make(chan error, 1)
				go func() { _, err := launcher.RunInternal(context.Background(), w.specs[i]); errs[i] <- err }()
				if i == 0 && tc.backend == "tcp" {
					testutil.WaitListening(t, w.ep) // node 0 hosts the rendezvous server
				}
			}
			// node 0's two workers have exited and been reaped (its attempt is over); node 1's two still run
			testutil.Eventually(t, "node 0's workers done, node 1's running", func() bool {
				ps := testutil.PIDs(t, w.dir)
				gone := 0
				for _, pid := range ps {
					if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
						gone++
					}
				}
				return len(ps) == 4 && gone == 2
			})
			if tc.killStore {
				stopStore()
			}
			w.sigs[0] <- syscall.SIGTERM
			select {
			case err := <-errs[0]:
				code := failure.ExitCode(err)
				// 69 only if the dead store was noticed (a lost store ends the job) before the SIGTERM
				if code != 143 && !(tc.killStore && code == failure.ExitRendezvous) {
					t.Fatalf("node 0: %v (exit %d), want stopped by SIGTERM (143)\n%s", err, code, w.specs[0].Stderr)
				}
				if code == 143 && !strings.Contains(err.Error(), "stopped by SIGTERM during the wait for the other nodes' outcome") {
					t.Fatalf("node 0: %v, want the stop named", err)
				}
			case <-time.After(testutil.Scaled(10 * time.Second)):
				t.Fatalf("node 0 is deaf to SIGTERM while it waits for node 1's outcome\n%s", w.specs[0].Stderr)
			}
			if tc.killStore { // nobody can tell node 1: stop it, twice (no more waiting)
				w.sigs[1] <- syscall.SIGTERM
				w.sigs[1] <- syscall.SIGTERM
			}
			select {
			case err := <-errs[1]:
				if failure.ExitCode(err) == 0 {
					t.Fatalf("node 1 exited 0 in a stopped world: %v", err)
				}
			case <-time.After(testutil.Deadline()):
				t.Fatalf("node 1 did not stop\n%s", w.specs[1].Stderr)
			}
			testutil.AssertAllGone(t, w.dir, 4)
		})
	}
}
