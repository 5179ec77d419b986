package main

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"tpurun/cmd/tpurun/internal/cli"
	"tpurun/internal/failure"
	"tpurun/internal/testutil"
	"tpurun/rendezvous"
)

// TestTCPRendezvousNeedsEndpoint: --rdzv-backend tcp with --nnodes 2 and no --rdzv-endpoint (nor a host list naming
// node 0) is a configuration error: exit 2 at once, saying what to pass, and no worker starts.
func TestTCPRendezvousNeedsEndpoint(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	// At once: runCLI's deadline comes long before the rendezvous timeout.
	r := runCLI(t, dir, []string{testutil.Fake("exit:0"), "TPU_WORKER_HOSTNAMES=", "SLURM_JOB_NODELIST="}, "--device", "cpu",
		"--nnodes", "2", "--rdzv-backend", "tcp", "--rdzv-id", "noep", "--rdzv-timeout", neverTimeout, "--", testutil.Program(t))
	if r.code != failure.ExitUsage || !strings.Contains(r.stderr, "tpurun: --rdzv-endpoint ") ||
		!strings.Contains(r.stderr, "tcp rendezvous of 2 nodes needs an endpoint (node 0's host:port)") {
		t.Fatalf("exit %d, want %d naming --rdzv-endpoint:\n%s", r.code, failure.ExitUsage, r.stderr)
	}
	if strings.Contains(r.stderr, "rendezvous: bad rendezvous") {
		t.Fatalf("the error repeats itself:\n%s", r.stderr)
	}
	if es, _ := os.ReadDir(dir + "/pids"); len(es) != 0 {
		t.Fatalf("%d workers started", len(es))
	}
}

// TestTCPRendezvousEndpointFromHostList: without --rdzv-endpoint, a TPU_WORKER_HOSTNAMES naming every node makes its
// first host (on --rdzv-conf port) the endpoint: two nodes agree on one world.
func TestTCPRendezvousEndpointFromHostList(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	_, port, _ := net.SplitHostPort(testutil.FreeEndpoint(t))
	var nodes []*node
	for i := 0; i < 2; i++ {
		env := append(os.Environ(), "FAKE_DIR="+dir, testutil.Fake("exit:0"), "TPU_WORKER_HOSTNAMES=127.0.0.1,127.0.0.2")
		nodes = append(nodes, startNode(t, env, "--device", "cpu", "--nnodes", "2", "--rdzv-backend", "tcp",
			"--rdzv-conf", "port="+port, "--rdzv-id", "hostlist", "--rdzv-timeout", joinTimeout, "--node-name", "n"+strconv.Itoa(i),
			"--", self(t)))
	}
	for i, n := range nodes {
		if code := n.wait(t); code != 0 {
			t.Fatalf("node %d: exit %d\n%s", i, code, n.stderr.String())
		}
	}
	if es, _ := os.ReadDir(dir + "/pids"); len(es) != 2 {
		t.Fatalf("%d workers ran, want 2 (one world of 2 nodes)", len(es))
	}
}

// TestMultihostSameHostNameFailsAtOnce: two launchers with the same host name (no --node-name on two machines
// named alike) in a 2-node world: the second is refused, and the first fails at once too, well within
// --rdzv-timeout, naming both claimants instead of a node that "never arrived". Both exit 69.
func TestMultihostSameHostNameFailsAtOnce(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	ep := testutil.FreeEndpoint(t)
	common := []string{"--device", "cpu", "--nnodes", "2", "--rdzv-backend", "tcp", "--rdzv-endpoint", ep, "--rdzv-id", "samehost",
		"--rdzv-timeout", neverTimeout, "--node-name", "same-host", "--", self(t)} // at once: the wait ends first
	env := append(os.Environ(), "FAKE_DIR="+dir, testutil.Fake("exit:0"))
	first := startNode(t, env, common...)
	testutil.WaitListening(t, ep)
	second := startNode(t, env, common...)
	for i, n := range []*node{first, second} {
		if code := n.wait(t); code != failure.ExitRendezvous {
			t.Fatalf("launcher %d: exit %d, want %d\n%s", i, code, failure.ExitRendezvous, n.stderr.String())
		}
		s := n.stderr.String()
		if strings.Contains(s, "never arrived") || !strings.Contains(s, "duplicate node") ||
			strings.Count(s[strings.LastIndex(s, "tpurun: "):], `host "same-host" instance `) != 2 {
			t.Fatalf("launcher %d does not name both claimants of host same-host:\n%s", i, s)
		}
	}
	if es, _ := os.ReadDir(dir + "/pids"); len(es) != 0 {
		t.Fatalf("%d workers started", len(es))
	}
}

// TestLateNodeLine: a node that came after its job ended (failure.JobClosedError) exits 0 with one line saying
// so, without the "(exit N)" of a failure; one whose restart the others did not make exits with the job's code.
func TestLateNodeLine(t *testing.T) {
	var b strings.Builder
	late := &failure.JobClosedError{Err: &rendezvous.JobClosedError{RunID: "j", Generation: 1, ExitCode: 3}, Code: 3}
	if code := cli.Exit(&b, "", late); code != 0 || !strings.HasPrefix(b.String(), "tpurun: job j already finished (generation 1, exit 3): ") ||
		strings.Contains(b.String(), "(exit 0)") || strings.Count(b.String(), "\n") != 1 {
		t.Fatalf("exit %d, printed %q", code, b.String())
	}
	b.Reset()
	late.Ran = true
	if code := cli.Exit(&b, "", late); code != 3 || !strings.HasSuffix(b.String(), "(exit 3)\n") {
		t.Fatalf("a node that ran the job: exit %d, printed %q", code, b.String())
	}
}
