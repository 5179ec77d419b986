package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/etcdtest"
)

// TestStragglerOfEarlierAttemptRefusedAlone: a JobSet restarts (JOBSET_RESTART_ATTEMPT 1) while a launcher of its
// previous attempt (attempt 0, so run id "js-uid-0") still runs. In torchrun's three steps (node 0 of the new
// attempt up, the straggler arrives, node 1 of the new attempt arrives), on tcp and on static: the straggler alone
// is refused at once, exit 69, naming both run ids, and the new attempt's two nodes form their world and run
// their workers (exit 0).
func TestStragglerOfEarlierAttemptRefusedAlone(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"tcp", "static"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			dir := testutil.FakeDir(t)
			ep := testutil.FreeEndpoint(t)
			env := func(attempt int) []string {
				return append(os.Environ(), "FAKE_DIR="+dir, testutil.Fake("exit:0"), "JOBSET_UID=js-uid", "JOBSET_RESTART_ATTEMPT="+strconv.Itoa(attempt))
			}
			args := func(rank int, name, timeout string) []string {
				return []string{"--device", "cpu", "--nprocs", "2", "--nnodes", "2", "--node-rank", strconv.Itoa(rank), "--rdzv-backend", backend,
					"--rdzv-endpoint", ep, "--rdzv-timeout", timeout, "--node-name", name, "--", self(t)}
			}
			node0 := startNode(t, env(1), args(0, "new0", joinTimeout)...)
			testutil.WaitListening(t, ep)
			// Refused at once: with a timeout longer than the test's deadline, waiting it out fails the wait.
			straggler := startNode(t, env(0), args(1, "old1", neverTimeout)...)
			if code := straggler.wait(t); code != 69 {
				t.Fatalf("straggler: exit %d, want 69\n%s", code, straggler.stderr.String())
			}
			if s := straggler.stderr.String(); !strings.Contains(s, `"js-uid-0"`) || !strings.Contains(s, `"js-uid-1"`) {
				t.Fatalf("the straggler's error does not name both run ids:\n%s", s)
			}
			node1 := startNode(t, env(1), args(1, "new1", joinTimeout)...)
			for i, n := range []*node{node0, node1} {
				if code := n.wait(t); code != 0 {
					t.Fatalf("node %d of the new attempt: exit %d, want 0\n%s", i, code, n.stderr.String())
				}
			}
			if es, _ := os.ReadDir(filepath.Join(dir, "ready")); len(es) != 4 {
				t.Fatalf("%d workers ran, want the new attempt's 4", len(es))
			}
		})
	}
}

// TestStragglerOfEarlierAttemptEtcd: the same three steps on etcd, where each run id has keys of its own: the new
// attempt's two nodes form their world and exit 0 while the straggler waits alone; when its join times out it
// exits 69 naming its run id and the one of the job open beside it.
func TestStragglerOfEarlierAttemptEtcd(t *testing.T) {
	t.Parallel()
	ep := etcdtest.StartOne(t)
	dir := testutil.FakeDir(t)
	env := func(attempt int) []string {
		return append(os.Environ(), "FAKE_DIR="+dir, testutil.Fake("exit:0"), "JOBSET_UID=js-etcd", "JOBSET_RESTART_ATTEMPT="+strconv.Itoa(attempt))
	}
	args := func(name, timeout string) []string {
		return []string{"--device", "cpu", "--nprocs", "2", "--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", ep,
			"--rdzv-timeout", timeout, "--node-name", name, "--", self(t)}
	}
	// The new job's record outlives its nodes until the straggler's timeout (linger): its run id is still open then.
	linger := []string{"--rdzv-conf", "linger=" + joinTimeout}
	node0 := startNode(t, env(1), append(linger, args("new0", joinTimeout)...)...)
	straggler := startNode(t, env(0), args("old1", shortTimeout)...)
	node1 := startNode(t, env(1), append(linger, args("new1", joinTimeout)...)...)
	for i, n := range []*node{node0, node1} {
		if code := n.wait(t); code != 0 {
			t.Fatalf("node %d of the new attempt: exit %d, want 0\n%s", i, code, n.stderr.String())
		}
	}
	if code := straggler.wait(t); code != 69 {
		t.Fatalf("straggler: exit %d, want 69\n%s", code, straggler.stderr.String())
	}
	if s := straggler.stderr.String(); !strings.Contains(s, `"js-etcd-0"`) || !strings.Contains(s, `"js-etcd-1"`) {
		t.Fatalf("the straggler's error does not name both run ids:\n%s", s)
	}
	if es, _ := os.ReadDir(filepath.Join(dir, "ready")); len(es) != 4 {
		t.Fatalf("%d workers ran, want the new attempt's 4", len(es))
	}
}
