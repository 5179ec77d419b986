package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/etcdtest"
)

// freeEndpoint is 127.0.0.1:port with a port that was free a moment ago.

// node is one tpurun process of a multi-host test.
type node struct {
	cmd            *exec.Cmd
	stdout, stderr testutil.Buffer
	done           chan struct{}
	code           int
}

// startNode starts the real tpurun binary as one node (not waiting for it).
func startNode(t *testing.T, env []string, args ...string) *node {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "tpurun"), args...)
	cmd.Env = env
	return runNode(t, cmd)
}

// runNode starts cmd as one node, its output into the node's buffers (not waiting for it); the test's end kills it.
func runNode(t *testing.T, cmd *exec.Cmd) *node {
	t.Helper()
	n := &node{cmd: cmd, done: make(chan struct{})}
	n.cmd.Stdout, n.cmd.Stderr = &n.stdout, &n.stderr
	mustDo(t, n.cmd.Start())
	go func() {
		err := n.cmd.Wait()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			n.code = -1
		} else {
			n.code = n.cmd.ProcessState.ExitCode()
		}
		close(n.done)
	}()
	t.Cleanup(func() {
		_ = n.cmd.Process.Kill()
		<-n.done
	})
	return n
}

// wait waits for the node to exit (Deadline at most) and returns its code.
func (n *node) wait(t *testing.T) int {
	t.Helper()
	timer := time.NewTimer(testutil.Deadline())
	defer timer.Stop()
	select {
	case <-n.done:
		return n.code
	case <-timer.C:
		t.Fatalf("node %v still running after %s\nstderr:\n%s", n.cmd.Args, testutil.Deadline(), n.stderr.String())
		return 0
	}
}

// The rendezvous timeouts of these tests. joinTimeout bounds a join that must complete: as long as the deadline,
// so that no loaded machine ever reaches it. neverTimeout is longer than the deadline: a test that expects
// something to happen "at once" gives the rendezvous this timeout, so that the slow path (waiting it out) fails
// the test's wait instead of passing late. shortTimeout is a timeout a test waits out on purpose: long enough
// for every event that must come before it (the other nodes' starts) on a loaded machine.
var (
	joinTimeout  = testutil.Deadline().String()
	neverTimeout = (2 * testutil.Deadline()).String()
	shortTimeout = testutil.Scaled(8 * time.Second).String()
)

// self is the program that plays the workers (envdump, fake): testutil's fake worker program.
func self(t *testing.T) string {
	t.Helper()
	return testutil.Program(t)
}

// runtimeKeys are the env vars a plan cannot know: picked at launch.
var runtimeKeys = map[string]bool{"MASTER_ADDR": true, "MASTER_PORT": true, "TORCHELASTIC_RUN_ID": true, "TPURUN_RUN_ID": true,
	"TORCHELASTIC_ERROR_FILE": true}

// checkWorldEnv checks the env dumped by every worker of every node: world size workers, each rank once, one agreed
// host list, and every rank's env equal to `tpurun plan` of the same slice built from that list on its host.
func checkWorldEnv(t *testing.T, hosts []*host, perHost int, planEnv func(i int) []string, planArgs ...string) {
	t.Helper()
	world := len(hosts) * perHost
	byRank := map[string]map[string]string{}
	for _, h := range hosts {
		for r, env := range h.dumped(t) {
			if _, dup := byRank[r]; dup {
				t.Fatalf("rank %s started twice", r)
			}
			byRank[r] = env
		}
	}
	if len(byRank) != world {
		t.Fatalf("%d ranks dumped their env, want %d", len(byRank), world)
	}
	agreed := byRank["0"]["TPU_WORKER_HOSTNAMES"]
	master := byRank["0"]["MASTER_ADDR"] + ":" + byRank["0"]["MASTER_PORT"]
	for r, env := range byRank {
		if env["TPU_WORKER_HOSTNAMES"] != agreed || env["MASTER_ADDR"]+":"+env["MASTER_PORT"] != master {
			t.Fatalf("rank %s sees hosts %q master %s:%s; rank 0 sees %q %s", r, env["TPU_WORKER_HOSTNAMES"],
				env["MASTER_ADDR"], env["MASTER_PORT"], agreed, master)
		}
		if env["WORLD_SIZE"] != strconv.Itoa(world) || env["RANK"] != r {
			t.Fatalf("rank %s: RANK=%s WORLD_SIZE=%s, want %s %d", r, env["RANK"], env["WORLD_SIZE"], r, world)
		}
	}
	// One plan per node, from the agreed host list, on that node's own fake host.
	for i, h := range hosts {
		wid := ""
		for _, env := range h.dumped(t) {
			wid = env["TPU_WORKER_ID"]
		}
		n, _ := strconv.Atoi(wid)
		env := append(planEnv(i), "TPU_WORKER_HOSTNAMES="+agreed, "TPU_WORKER_ID="+wid)
		p := h.plan(t, env, planArgs...)
		if len(p.Workers) != world {
			t.Fatalf("plan of node %d: %d workers, want %d", n, len(p.Workers), world)
		}
		for _, w := range p.Workers {
			got, ok := byRank[strconv.Itoa(w.Rank)]
			if !ok {
				t.Fatalf("rank %d never ran", w.Rank)
			}
			if w.NodeRank != n {
				continue // another node's workers: checked against that node's plan
			}
			want := map[string]string{}
			for k, v := range w.Env {
				if !runtimeKeys[k] {
					want[k] = v
				}
			}
			sub := map[string]string{}
			for k := range want {
				sub[k] = got[k]
			}
			if !equalEnv(sub, want) {
				t.Errorf("rank %d (node %d): env differs from the single plan:\n%s", w.Rank, n, envDiff(sub, want))
			}
		}
	}
}

// TestMultihostTCPv4_32: 4 tpurun processes, each with its own fake 4-chip v4 host, agree over the tcp backend on one
// v4-32 world: every rank's env equals the plan of the whole slice built from the agreed host list.
func TestMultihostTCPv4_32(t *testing.T) {
	t.Parallel()
	testutil.Heavy(t) // 4 launchers, 16 workers, 4 plans
	ep := testutil.FreeEndpoint(t)
	base := portBase(t)
	var hosts []*host
	var nodes []*node
	for i := 0; i < 4; i++ {
		h := newHost(t, idV4, 4)
		hosts = append(hosts, h)
		args := []string{"--sysfs-root", h.sys, "--dev-root", h.dev, "--tpu-port-base", strconv.Itoa(base),
			"--nnodes", "4", "--rdzv-backend", "tcp", "--rdzv-endpoint", ep, "--rdzv-id", "v432", "--rdzv-timeout", joinTimeout,
			"--node-name", fmt.Sprintf("tpu-host-%d", i), "--node-addr", fmt.Sprintf("127.0.0.%d", i+1), "--", self(t)}
		nodes = append(nodes, startNode(t, append(h.env, "TPU_ACCELERATOR_TYPE=v4-32"), args...))
	}
	for i, n := range nodes {
		if code := n.wait(t); code != 0 {
			t.Fatalf("node %d: exit %d\n%s", i, code, n.stderr.String())
		}
	}
	checkWorldEnv(t, hosts, 4, func(int) []string { return []string{"TPU_ACCELERATOR_TYPE=v4-32"} },
		"--tpu-port-base", strconv.Itoa(base))
}

// TestMultihostStaticFromTPUEnv: 2 nodes told who they are by TPU_WORKER_ID/TPU_WORKER_HOSTNAMES (static backend,
// node 0 hosts the server on host 0) run one v4-16 world equal to its single plan.
func TestMultihostStaticFromTPUEnv(t *testing.T) {
	t.Parallel()
	_, port, _ := net.SplitHostPort(testutil.FreeEndpoint(t))
	base := portBase(t)
	hostList := "127.0.0.1,127.0.0.2"
	var hosts []*host
	var nodes []*node
	for i := 0; i < 2; i++ {
		h := newHost(t, idV4, 4)
		hosts = append(hosts, h)
		env := append(h.env, "TPU_ACCELERATOR_TYPE=v4-16", "TPU_WORKER_ID="+strconv.Itoa(i), "TPU_WORKER_HOSTNAMES="+hostList)
		nodes = append(nodes, startNode(t, env, "--sysfs-root", h.sys, "--dev-root", h.dev, "--tpu-port-base", strconv.Itoa(base),
			"--rdzv-backend", "static", "--rdzv-conf", "port="+port, "--rdzv-id", "static16", "--rdzv-timeout", joinTimeout, "--", self(t)))
	}
	for i, n := range nodes {
		if code := n.wait(t); code != 0 {
			t.Fatalf("node %d: exit %d\n%s", i, code, n.stderr.String())
		}
	}
	checkWorldEnv(t, hosts, 4, func(int) []string { return []string{"TPU_ACCELERATOR_TYPE=v4-16"} },
		"--tpu-port-base", strconv.Itoa(base))
	if got := hosts[1].dumped(t)["4"]["TPU_WORKER_HOSTNAMES"]; got != hostList {
		t.Fatalf("TPU_WORKER_HOSTNAMES=%q, want the static list %q", got, hostList)
	}
}

// cpuNodes starts n CPU nodes of 2 fake workers each over the given backend; FAKE_DIR is shared.
func cpuNodes(t *testing.T, dir string, n int, env []string, extra func(i int) []string) []*node {
	t.Helper()
	var nodes []*node
	for i := 0; i < n; i++ {
		args := []string{"--device", "cpu", "--nprocs", "2", "--nnodes", strconv.Itoa(n), "--rdzv-id", "cpu-" + filepath.Base(dir),
			"--node-name", "n" + strconv.Itoa(i), "--grace", "2s"}
		args = append(append(args, extra(i)...), "--", self(t))
		nodes = append(nodes, startNode(t, append(append(os.Environ(), "FAKE_DIR="+dir), env...), args...))
	}
	return nodes
}

// TestMultihostWorkerFailureStopsEveryNode: rank 4 (on node 2 of 3) exits 7 while every other rank hangs: every
// node stops its workers at once and all three launchers exit 7, the failing rank's code.
func TestMultihostWorkerFailureStopsEveryNode(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	ep := testutil.FreeEndpoint(t)
	start := time.Now()
	// The failure is announced at once: a heartbeat longer than the deadline keeps any slower way of learning
	// it (a node noticing another's silence) from passing the wait; node 2's launcher ending is announced as a
	// loss (exit 69), never as rank 4's code.
	nodes := cpuNodes(t, dir, 3, []string{testutil.Fake("hang"), testutil.FakeRank(4, "exitready:7")}, func(int) []string {
		return []string{"--rdzv-backend", "tcp", "--rdzv-endpoint", ep, "--rdzv-timeout", joinTimeout, "--rdzv-conf", "heartbeat=" + neverTimeout}
	})
	testutil.WaitReady(t, dir, 6)
	for i, n := range nodes {
		if code := n.wait(t); code != 7 {
			t.Fatalf("node %d: exit %d, want 7 (rank 4's code)\n%s", i, code, n.stderr.String())
		}
	}
	if !strings.Contains(nodes[0].stderr.String(), "rank 4") {
		t.Fatalf("node 0 does not name rank 4:\n%s", nodes[0].stderr.String())
	}
	testutil.AssertAllGone(t, dir, 6)
	t.Logf("3 nodes up and stopped in %s", time.Since(start))
}

// TestMultihostKilledLauncherDetected: node 1's launcher is SIGKILLed (tcp: its connection drops; etcd: its lease
// expires) or frozen by SIGSTOP (tcp: it misses the heartbeat) while every worker hangs: node 0 notices within the
// heartbeat, stops its workers and exits 69 naming node 1.
func TestMultihostKilledLauncherDetected(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		sig     syscall.Signal
		backend string
	}{{"tcp-SIGKILL", syscall.SIGKILL, "tcp"}, {"tcp-SIGSTOP", syscall.SIGSTOP, "tcp"}, {"etcd-SIGKILL", syscall.SIGKILL, "etcd"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := testutil.FakeDir(t)
			ep := ""
			if tc.backend == "etcd" {
				ep = etcdtest.StartOne(t)
			} else {
				ep = testutil.FreeEndpoint(t)
			}
			// With the default heartbeat: a frozen launcher is noticed by its silence, a killed one by its dropped
			// connection (tcp) or its lease (etcd, TTL = the heartbeat). Nothing else ends the run: the workers
			// hang and the rendezvous timeout is past the deadline.
			nodes := cpuNodes(t, dir, 2, []string{testutil.Fake("hang")}, func(i int) []string {
				args := []string{"--rdzv-backend", tc.backend, "--rdzv-endpoint", ep, "--rdzv-timeout", neverTimeout, "--node-rank", strconv.Itoa(i)}
				if tc.backend == "tcp" {
					args = append(args, "--rdzv-conf", "is_host="+strconv.FormatBool(i == 0))
				}
				return args
			})
			testutil.WaitReady(t, dir, 4)
			victim, survivor := nodes[1], nodes[0]
			mustDo(t, victim.cmd.Process.Signal(tc.sig))
			if code := survivor.wait(t); code != 69 {
				t.Fatalf("survivor: exit %d, want 69\n%s", code, survivor.stderr.String())
			}
			if !strings.Contains(survivor.stderr.String(), `"n1"`) {
				t.Fatalf("survivor does not name the lost node n1:\n%s", survivor.stderr.String())
			}
			if tc.sig == syscall.SIGSTOP {
				mustDo(t, victim.cmd.Process.Signal(syscall.SIGKILL))
			}
			testutil.AssertAllGone(t, dir, 4)
		})
	}
}

// TestMultihostMissingNodeTimesOut: 2 of 3 nodes arrive: both exit 69 after --rdzv-timeout, saying which node never
// arrived; no worker was started.
func TestMultihostMissingNodeTimesOut(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	ep := testutil.FreeEndpoint(t)
	var nodes []*node
	for i := 0; i < 2; i++ {
		nodes = append(nodes, startNode(t, append(os.Environ(), "FAKE_DIR="+dir, testutil.Fake("exit:0")), "--device", "cpu",
			"--nnodes", "3", "--node-rank", strconv.Itoa(i), "--rdzv-backend", "tcp", "--rdzv-endpoint", ep, "--rdzv-id", "missing",
			"--rdzv-timeout", shortTimeout, "--node-name", "n"+strconv.Itoa(i), "--", self(t)))
	}
	for i, n := range nodes {
		if code := n.wait(t); code != 69 {
			t.Fatalf("node %d: exit %d, want 69\n%s", i, code, n.stderr.String())
		}
		if s := n.stderr.String(); !strings.Contains(s, "never arrived") || !strings.Contains(s, "node rank 2") {
			t.Fatalf("node %d does not name the missing node rank 2:\n%s", i, s)
		}
	}
	if es, _ := os.ReadDir(filepath.Join(dir, "pids")); len(es) != 0 {
		t.Fatalf("%d workers started without a complete world", len(es))
	}
}

// TestMultihostDuplicateNodeRankRejected: a second launcher claiming --node-rank 0 is refused at once with both
// instances named; it exits 69.
func TestMultihostDuplicateNodeRankRejected(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	ep := testutil.FreeEndpoint(t)
	common := []string{"--device", "cpu", "--nnodes", "2", "--node-rank", "0", "--rdzv-backend", "tcp", "--rdzv-endpoint", ep,
		"--rdzv-id", "dup", "--rdzv-timeout", neverTimeout, "--"} // refused at once, not at the timeout
	env := append(os.Environ(), "FAKE_DIR="+dir, testutil.Fake("exit:0"))
	first := startNode(t, env, append(append([]string{"--node-name", "a"}, common...), self(t))...)
	testutil.WaitListening(t, ep)
	second := startNode(t, env, append(append([]string{"--node-name", "b"}, common...), self(t))...)
	c2, c1 := second.wait(t), first.wait(t)
	if c1 != 69 || c2 != 69 {
		t.Fatalf("exits %d and %d, want 69 and 69\nfirst:\n%s\nsecond:\n%s", c1, c2, first.stderr.String(), second.stderr.String())
	}
	if !strings.Contains(first.stderr.String()+second.stderr.String(), "duplicate") {
		t.Fatalf("no launcher reports the duplicate node:\nfirst:\n%s\nsecond:\n%s", first.stderr.String(), second.stderr.String())
	}
}

// TestMultihostWrongTokenRefused: a node whose TPURUN_RDZV_TOKEN differs from the server's --rdzv-token is refused
// and exits 69 saying so.
func TestMultihostWrongTokenRefused(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	ep := testutil.FreeEndpoint(t)
	common := []string{"--device", "cpu", "--nnodes", "2", "--rdzv-backend", "tcp", "--rdzv-endpoint", ep,
		"--rdzv-id", "tok", "--rdzv-timeout", shortTimeout} // the good node waits it out
	env := append(os.Environ(), "FAKE_DIR="+dir, testutil.Fake("exit:0"))
	good := startNode(t, env, append(common, "--node-name", "good", "--rdzv-token", "s3cret", "--", self(t))...)
	testutil.WaitListening(t, ep)
	bad := startNode(t, append(env, "TPURUN_RDZV_TOKEN=wrong"), append(common, "--node-name", "bad", "--", self(t))...)
	if code := bad.wait(t); code != 69 {
		t.Fatalf("bad token: exit %d, want 69\n%s", code, bad.stderr.String())
	}
	if s := bad.stderr.String(); !strings.Contains(s, "token") || strings.Contains(s, "s3cret") || strings.Contains(s, "wrong") {
		t.Fatalf("bad token: stderr must say the token was refused and never print a token:\n%s", s)
	}
	if code := good.wait(t); code != 69 {
		t.Fatalf("good node: exit %d, want 69 (the other node never joined)\n%s", code, good.stderr.String())
	}
}

// TestMultihostEtcd: 2 CPU nodes rendezvous on a real (embedded) etcd server and run one world of 4 ranks; then a
// worker failure on node 1 stops node 0 with the failing rank's code.
func TestMultihostEtcd(t *testing.T) {
	t.Parallel()
	ep := etcdtest.StartOne(t)
	// The failure is announced at once: with a heartbeat (lease TTL) longer than the deadline, no slower way of
	// learning it passes the wait.
	rdzv := func(int) []string {
		return []string{"--rdzv-backend", "etcd", "--rdzv-endpoint", ep, "--rdzv-timeout", joinTimeout, "--rdzv-conf", "heartbeat=" + neverTimeout}
	}

	dir := testutil.FakeDir(t)
	for i, n := range cpuNodes(t, dir, 2, []string{testutil.Fake("exit:0")}, rdzv) {
		if code := n.wait(t); code != 0 {
			t.Fatalf("etcd node %d: exit %d\n%s", i, code, n.stderr.String())
		}
	}
	if es, _ := os.ReadDir(filepath.Join(dir, "ready")); len(es) != 4 {
		t.Fatalf("%d ranks ran over etcd, want 4", len(es))
	}

	dir = testutil.FakeDir(t)
	nodes := cpuNodes(t, dir, 2, []string{testutil.Fake("hang"), testutil.FakeRank(3, "exitready:5")}, rdzv)
	testutil.WaitReady(t, dir, 4)
	for i, n := range nodes {
		if code := n.wait(t); code != 5 {
			t.Fatalf("etcd node %d: exit %d, want 5 (rank 3's code)\n%s", i, code, n.stderr.String())
		}
	}
	testutil.AssertAllGone(t, dir, 4)
}

// TestMultihostMaxRestartsNewGeneration: rank 3 fails once; with --max-restarts 1 both nodes agree on the failure,
// join generation 1 together and succeed; without restarts both exit with rank 3's code.
func TestMultihostMaxRestartsNewGeneration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		restarts string
		want     int
	}{{"1", 0}, {"0", 4}} {
		dir := t.TempDir()
		ep := testutil.FreeEndpoint(t)
		script := `if [ "$RANK" = 3 ] && [ ! -e "$D/failed" ]; then : > "$D/failed"; exit 4; fi; echo "gen-ok $RANK $GROUP_RANK"`
		var nodes []*node
		for i := 0; i < 2; i++ {
			nodes = append(nodes, startNode(t, append(os.Environ(), "D="+dir), "--device", "cpu", "--nprocs", "2", "--nnodes", "2",
				"--rdzv-backend", "tcp", "--rdzv-endpoint", ep, "--rdzv-id", "restart", "--rdzv-timeout", joinTimeout,
				"--node-name", "n"+strconv.Itoa(i), "--max-restarts", tc.restarts, "--", "sh", "-c", script))
		}
		for i, n := range nodes {
			if code := n.wait(t); code != tc.want {
				t.Fatalf("--max-restarts %s: node %d exit %d, want %d\n%s", tc.restarts, i, code, tc.want, n.stderr.String())
			}
		}
		if tc.want == 0 {
			out := nodes[0].stdout.String() + nodes[1].stdout.String()
			for r := 0; r < 4; r++ {
				if !strings.Contains(out, fmt.Sprintf("gen-ok %d %d", r, r/2)) {
					t.Fatalf("rank %d did not succeed in generation 1:\n%s", r, out)
				}
			}
			if !strings.Contains(nodes[0].stderr.String()+nodes[1].stderr.String(), `"generation": 1`) {
				t.Fatalf("no node joined generation 1:\n%s", nodes[0].stderr.String())
			}
		}
	}
}

// TestMultihostResultsWorldWide: 2 nodes x 2 workers in function mode: node 0 prints one document with exactly one
// result per replica of the whole world (computed on both nodes), node 1 (also given --json) the same one; both
// nodes exit 0.
func TestMultihostResultsWorldWide(t *testing.T) {
	t.Parallel()
	py := testutil.Need(t, "python3") // stdlib only
	wd, err := os.Getwd()
	mustDo(t, err)
	target := filepath.Join(wd, "..", "..", "examples", "fn_square.py") + ":square"
	ep := testutil.FreeEndpoint(t)
	var nodes []*node
	for i := 0; i < 2; i++ {
		nodes = append(nodes, startNode(t, os.Environ(), "--device", "cpu", "--nprocs", "2", "--nnodes", "2", "--node-rank", strconv.Itoa(i),
			"--rdzv-backend", "tcp", "--rdzv-endpoint", ep, "--rdzv-id", "results", "--rdzv-timeout", joinTimeout, "--node-name", "n"+strconv.Itoa(i),
			"--json", "--python", py, "--fn", target, "7"))
	}
	for i, n := range nodes {
		if code := n.wait(t); code != 0 {
			t.Fatalf("node %d: exit %d\n%s", i, code, n.stderr.String())
		}
	}
	if a, b := nodes[0].stdout.String(), nodes[1].stdout.String(); a != b { // --json on any node: the world's document
		t.Fatalf("node 1 printed\n%s\nnode 0 printed\n%s", b, a)
	}
	var doc struct {
		OK      bool `json:"ok"`
		Results []struct {
			Replica int `json:"replica"`
			Node    int `json:"node"`
			Value   struct {
				Square int `json:"square"`
				Rank   int `json:"rank"`
			} `json:"value"`
		} `json:"results"`
	}
	mustDo(t, json.Unmarshal([]byte(nodes[0].stdout.String()), &doc))
	if !doc.OK || len(doc.Results) != 4 {
		t.Fatalf("document: ok=%v with %d results, want ok with 4:\n%s", doc.OK, len(doc.Results), nodes[0].stdout.String())
	}
	seen := map[int]bool{}
	for _, r := range doc.Results {
		if seen[r.Replica] || r.Value.Square != r.Replica*r.Replica+7 || r.Node != r.Replica/2 || r.Value.Rank != r.Replica {
			t.Fatalf("replica %d: node %d value %+v (duplicate=%v)", r.Replica, r.Node, r.Value, seen[r.Replica])
		}
		seen[r.Replica] = true
	}
}

// TestMultihost8NodesAgree: 8 launchers of one CPU worker each agree on one world of 8 ranks: node n runs rank n
// with GROUP_RANK n, and every rank sees the same master.
func TestMultihost8NodesAgree(t *testing.T) {
	t.Parallel()
	testutil.Heavy(t) // 8 launchers
	dumps := t.TempDir()
	ep := testutil.FreeEndpoint(t)
	var nodes []*node
	for i := 0; i < 8; i++ {
		nodes = append(nodes, startNode(t, append(os.Environ(), testutil.Fake("envdump:"+dumps)), "--device", "cpu", "--nnodes", "8",
			"--rdzv-backend", "tcp", "--rdzv-endpoint", ep, "--rdzv-id", "eight", "--rdzv-timeout", joinTimeout,
			"--node-name", "n"+strconv.Itoa(i), "--", self(t)))
	}
	for i, n := range nodes {
		if code := n.wait(t); code != 0 {
			t.Fatalf("node %d: exit %d\n%s", i, code, n.stderr.String())
		}
	}
	h := &host{dumps: dumps}
	got := h.dumped(t)
	if len(got) != 8 {
		t.Fatalf("%d ranks ran, want 8", len(got))
	}
	master := got["0"]["MASTER_ADDR"] + ":" + got["0"]["MASTER_PORT"]
	for r := 0; r < 8; r++ {
		env := got[strconv.Itoa(r)]
		if env["GROUP_RANK"] != strconv.Itoa(r) || env["WORLD_SIZE"] != "8" || env["GROUP_WORLD_SIZE"] != "8" ||
			env["MASTER_ADDR"]+":"+env["MASTER_PORT"] != master {
			t.Fatalf("rank %d: GROUP_RANK=%s WORLD_SIZE=%s GROUP_WORLD_SIZE=%s master %s:%s (rank 0: %s)", r, env["GROUP_RANK"],
				env["WORLD_SIZE"], env["GROUP_WORLD_SIZE"], env["MASTER_ADDR"], env["MASTER_PORT"], master)
		}
	}
}

// TestMultihostTorchAllReduce: real PyTorch, 2 nodes x 2 workers over the tcp rendezvous: one gloo all_reduce of
// the 4-rank world through node 0's MASTER_ADDR/MASTER_PORT (skipped only without torch outside CI).
func TestMultihostTorchAllReduce(t *testing.T) {
	script := needTorch(t)
	ep := testutil.FreeEndpoint(t)
	torchAllReduce(t, script, func(i int) []string {
		return []string{"--device", "cpu", "--nproc-per-node", "2", "--nnodes", "2", "--rdzv-backend", "tcp", "--rdzv-endpoint", ep,
			"--rdzv-id", "torch", "--rdzv-timeout", joinTimeout, "--node-name", "n" + strconv.Itoa(i), script}
	})
}

// TestTorchrunStaticLineTwoAgentsOneHost: real PyTorch with torchrun's own static multi-node command line, two
// agents on this one host told apart only by --node_rank: the gloo all_reduce of the 4-rank world goes through
// MASTER_ADDR:MASTER_PORT as given.
func TestTorchrunStaticLineTwoAgentsOneHost(t *testing.T) {
	script := needTorch(t)
	port := strconv.Itoa(portBase(t))
	torchAllReduce(t, script, func(i int) []string {
		return []string{"--nnodes=2", "--node_rank=" + strconv.Itoa(i), "--master_addr=127.0.0.1", "--master_port=" + port,
			"--nproc_per_node=2", script}
	})
}

// torchAllReduce runs two launchers with args(i) and checks the 4 ranks' all_reduce lines.
func torchAllReduce(t *testing.T, script string, args func(i int) []string) {
	t.Helper()
	var nodes []*node
	for i := 0; i < 2; i++ {
		nodes = append(nodes, startNode(t, append(os.Environ(), "PYTHON_EXEC="+torchPython), args(i)...))
	}
	out := ""
	for i, n := range nodes {
		if code := n.wait(t); code != 0 {
			t.Fatalf("node %d: exit %d\n%s\n%s", i, code, n.stdout.String(), n.stderr.String())
		}
		out += n.stdout.String()
	}
	for rank := 0; rank < 4; rank++ {
		if want := fmt.Sprintf("rank %d/4 (local %d): all_reduce sum 10", rank, rank%2); !strings.Contains(out, want) {
			t.Errorf("no line %q in stdout:\n%s", want, out)
		}
	}
}

// TestMultihostMultislice: 2 slices of one v4-8 host each (--num-slices 2 --slice-id i): global ranks across the
// slices, the slice-local TPU env of a v4-8, and MEGASCALE_* pointing at host 0 of slice 0.
func TestMultihostMultislice(t *testing.T) {
	t.Parallel()
	ep := testutil.FreeEndpoint(t)
	// Each slice is one host here, so each replaces busy TPU ports with free ones; both share this machine, so
	// each gets a port range of its own, as separate hosts would have.
	bases := []int{portBase(t), portBase(t)}
	var hosts []*host
	var nodes []*node
	for i := 0; i < 2; i++ {
		h := newHost(t, idV4, 4)
		hosts = append(hosts, h)
		// slice 1 starts first so that the agreed order (by slice) is not the arrival order
		nodes = append(nodes, startNode(t, append(h.env, "TPU_ACCELERATOR_TYPE=v4-8"), "--sysfs-root", h.sys, "--dev-root", h.dev,
			"--tpu-port-base", strconv.Itoa(bases[1-i]), "--nnodes", "2", "--rdzv-backend", "tcp", "--rdzv-endpoint", ep, "--rdzv-id", "ms",
			"--rdzv-timeout", joinTimeout, "--num-slices", "2", "--slice-id", strconv.Itoa(1-i), "--node-name", "s"+strconv.Itoa(1-i),
			"--node-addr", fmt.Sprintf("127.0.0.%d", 10+1-i), "--", self(t)))
	}
	for i, n := range nodes {
		if code := n.wait(t); code != 0 {
			t.Fatalf("node %d: exit %d\n%s", i, code, n.stderr.String())
		}
	}
	for i, h := range hosts {
		slice := 1 - i
		single := h.plan(t, []string{"TPU_ACCELERATOR_TYPE=v4-8"}, "--tpu-port-base", strconv.Itoa(bases[slice]))
		got := h.dumped(t)
		if len(got) != 4 {
			t.Fatalf("slice %d: %d ranks ran, want 4", slice, len(got))
		}
		for lr := 0; lr < 4; lr++ {
			rank := slice*4 + lr
			env, ok := got[strconv.Itoa(rank)]
			if !ok {
				t.Fatalf("slice %d: rank %d did not run here (ranks %v)", slice, rank, keys(got))
			}
			want := map[string]string{"WORLD_SIZE": "8", "GROUP_RANK": strconv.Itoa(slice), "LOCAL_RANK": strconv.Itoa(lr),
				"MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": strconv.Itoa(slice), "MEGASCALE_COORDINATOR_ADDRESS": "127.0.0.10",
				"MEGASCALE_PORT": "8081", "MASTER_ADDR": "127.0.0.10"}
			for _, k := range []string{"TPU_WORKER_ID", "CLOUD_TPU_TASK_ID", "TPU_PROCESS_BOUNDS", "TPU_VISIBLE_CHIPS", "TPU_PROCESS_PORT",
				"TPU_CHIPS_PER_PROCESS_BOUNDS", "TPU_HOST_BOUNDS"} {
				want[k] = single.Workers[lr].Env[k]
			}
			for k, v := range want {
				if env[k] != v {
					t.Errorf("slice %d rank %d: %s=%q, want %q", slice, rank, k, env[k], v)
				}
			}
		}
	}
}

func keys(m map[string]map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestMultihostMismatchNamesOddNode: 3 nodes, one of them a GPU host where the others run on CPU: every node exits
// 69 at once, naming the odd node; nothing is started.
func TestMultihostMismatchNamesOddNode(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	ep := testutil.FreeEndpoint(t)
	gpu := newGPUHost(t, 2)
	var nodes []*node
	for i := 0; i < 3; i++ {
		dev := []string{"--device", "cpu"}
		if i == 2 {
			dev = []string{"--sysfs-root", gpu.sys, "--dev-root", gpu.dev}
		}
		nodes = append(nodes, startNode(t, append(os.Environ(), "FAKE_DIR="+dir, testutil.Fake("exit:0")), append(dev, "--nprocs", "2",
			"--nnodes", "3", "--rdzv-backend", "tcp", "--rdzv-endpoint", ep, "--rdzv-id", "odd", "--rdzv-timeout", joinTimeout,
			"--node-name", "n"+strconv.Itoa(i), "--", self(t))...))
	}
	for i, n := range nodes {
		if code := n.wait(t); code != 69 {
			t.Fatalf("node %d: exit %d, want 69\n%s", i, code, n.stderr.String())
		}
		if s := n.stderr.String(); !strings.Contains(s, "disagree") || !strings.Contains(s, `"n2"`) || !strings.Contains(s, "accelerator type") {
			t.Fatalf("node %d does not name the odd node n2 and its accelerator type:\n%s", i, s)
		}
	}
	if es, _ := os.ReadDir(filepath.Join(dir, "pids")); len(es) != 0 {
		t.Fatalf("%d workers started in a world that disagrees", len(es))
	}
}

// TestMultihostElasticNodeLost: an elastic world (--nnodes 2:3, --max-restarts 1) of three launchers loses node 2
// (its launcher SIGKILLed while every worker hangs): the survivors, on tcp (node 0 hosts the server) and on a real
// etcd, stop their workers and restart as generation 1 with the two nodes they have (after the last call), where
// the workers see TORCHELASTIC_RESTART_COUNT=1 and WORLD_SIZE=4 and exit 0: both survivors exit 0.
func TestMultihostElasticNodeLost(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"tcp", "etcd"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			dir := testutil.FakeDir(t)
			var ep string
			if backend == "etcd" {
				ep = etcdtest.StartOne(t)
			} else {
				ep = testutil.FreeEndpoint(t)
			}
			nodes := cpuNodes(t, dir, 3, []string{testutil.Fake("hanguntil:1")}, func(i int) []string {
				conf := "last_call_timeout=1" // the default heartbeat: the lost launcher is noticed by its connection or lease
				if backend == "tcp" {
					conf += ",is_host=" + strconv.FormatBool(i == 0)
				}
				return []string{"--nnodes", "2:3", "--max-restarts", "1", "--rdzv-backend", backend, "--rdzv-endpoint", ep,
					"--rdzv-timeout", joinTimeout, "--rdzv-conf", conf}
			})
			testutil.WaitReady(t, dir, 6)
			mustDo(t, nodes[2].cmd.Process.Signal(syscall.SIGKILL))
			for i, n := range nodes[:2] {
				if code := n.wait(t); code != 0 {
					t.Fatalf("survivor %d: exit %d, want 0 after an elastic restart\n%s", i, code, n.stderr.String())
				}
				out, errs := n.stdout.String(), n.stderr.String()
				if strings.Count(out, "of 4 exits 0 in generation 1") != 2 || !strings.Contains(errs, "lost") {
					t.Fatalf("survivor %d: workers of generation 1 did not run in a world of 4:\n%s\n%s", i, out, errs)
				}
			}
			testutil.AssertAllGone(t, dir, 6)
		})
	}
}

// TestMultihostLostNodeReplaced: a fixed world of three (--nnodes 3, --max-restarts 1, real etcd) loses node 2's
// launcher; a replacement launcher started with the same command joins the generation being formed, and the
// world of three restarts as generation 1: every node, the replacement included, exits 0.
func TestMultihostLostNodeReplaced(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	ep := etcdtest.StartOne(t)
	args := func(i int) []string {
		return []string{"--max-restarts", "1", "--rdzv-backend", "etcd", "--rdzv-endpoint", ep, "--rdzv-timeout", joinTimeout}
	}
	nodes := cpuNodes(t, dir, 3, []string{testutil.Fake("hanguntil:1")}, args)
	testutil.WaitReady(t, dir, 6)
	mustDo(t, nodes[2].cmd.Process.Signal(syscall.SIGKILL))
	replacement := cpuNodes(t, dir, 1, []string{testutil.Fake("hanguntil:1")}, func(int) []string {
		return append(args(2), "--nnodes", "3", "--node-name", "n2-new")
	})[0]
	for i, n := range []*node{nodes[0], nodes[1], replacement} {
		if code := n.wait(t); code != 0 {
			t.Fatalf("node %d: exit %d, want 0 after the restart with the replacement\n%s", i, code, n.stderr.String())
		}
		if out := n.stdout.String(); strings.Count(out, "of 6 exits 0 in generation 1") != 2 {
			t.Fatalf("node %d: generation 1 did not run in a world of 6:\n%s\n%s", i, out, n.stderr.String())
		}
	}
	testutil.AssertAllGone(t, dir, 8)
}
