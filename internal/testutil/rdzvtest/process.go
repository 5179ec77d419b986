package rdzvtest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tpurun/internal/testutil"
	"tpurun/rendezvous"
)

// NodeVerb is the fake-worker verb (testutil) that makes the test binary one node of a rendezvous (childNode), so
// that a test can SIGKILL a real launcher process. A package whose tests call StartNodeProcess Defines it in an
// init function.
var NodeVerb = testutil.Verb{Name: "rdzvnode", Run: childNode}

// childNode: rdzvnode:BACKEND, RDZV_TEST_ENDPOINT, RDZV_TEST_NNODES, RDZV_TEST_RANK, RDZV_TEST_HOST,
// RDZV_TEST_HB (duration), and for an elastic world RDZV_TEST_MIN, RDZV_TEST_LASTCALL (duration) and
// RDZV_TEST_GEN=latest; RDZV_TEST_INSTANCE sets its instance (a random one when empty). Prints "joined <rank>"
// and then blocks until killed (or stdin closes).
func childNode(w *testutil.Worker) int {
	nn, _ := strconv.Atoi(os.Getenv("RDZV_TEST_NNODES"))
	rank, _ := strconv.Atoi(os.Getenv("RDZV_TEST_RANK"))
	hb, _ := time.ParseDuration(os.Getenv("RDZV_TEST_HB"))
	minNodes, _ := strconv.Atoi(os.Getenv("RDZV_TEST_MIN"))
	lastCall, _ := time.ParseDuration(os.Getenv("RDZV_TEST_LASTCALL"))
	gen := 0
	if os.Getenv("RDZV_TEST_GEN") == "latest" {
		gen = rendezvous.LatestGeneration
	}
	cfg := rendezvous.Config{Backend: w.Arg, Endpoint: os.Getenv("RDZV_TEST_ENDPOINT"), NNodes: nn, MinNodes: minNodes,
		LastCall: lastCall, NodeRank: rank, Timeout: Never(), Heartbeat: hb, RunID: "run", Conf: map[string]string{}}
	if p := os.Getenv("RDZV_TEST_PREFIX"); p != "" {
		cfg.Conf["prefix"] = p
	}
	if b, err := rendezvous.Lookup(cfg.Backend); err == nil && b.HostsServer() && b.Elastic() { // tcp: node 0 hosts
		cfg.Conf["is_host"] = "false"
		if rank == 0 {
			cfg.Conf["is_host"] = "true"
		}
	}
	ctx := context.Background()
	r, err := rendezvous.New(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 3
	}
	s, err := r.Join(ctx, rendezvous.Member{Instance: os.Getenv("RDZV_TEST_INSTANCE"), Host: os.Getenv("RDZV_TEST_HOST"), Addr: "127.0.0.1",
		LocalWorkers: 4, Accelerator: "v4-32", Rank: rank, Generation: gen})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 4
	}
	fmt.Printf("joined %d\n", s.Assignment().NodeRank)
	buf := make([]byte, 1)
	os.Stdin.Read(buf) // block until killed
	return 0
}

// StartNodeProcess re-executes the test binary as one node (see childNode) and returns it with the lines it
// prints ("joined <rank>" once it has joined); the process is killed and reaped at cleanup.
func StartNodeProcess(t *testing.T, backend, endpoint string, nnodes, rank int, hb time.Duration, env ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := testutil.Command("rdzvnode:" + backend)
	cmd.Env = append(cmd.Env, "RDZV_TEST_ENDPOINT="+endpoint,
		fmt.Sprintf("RDZV_TEST_NNODES=%d", nnodes), fmt.Sprintf("RDZV_TEST_RANK=%d", rank),
		"RDZV_TEST_HOST="+HostName(rank), "RDZV_TEST_HB="+hb.String())
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

// WaitLine waits for the node process's next line and requires it to start with prefix.
func WaitLine(t *testing.T, lines <-chan string, prefix string) {
	t.Helper()
	if l := testutil.Done(t, fmt.Sprintf("the node process to print %q", prefix), lines); !strings.HasPrefix(l, prefix) {
		t.Fatalf("node process said %q, want %q", l, prefix)
	}
}

// Killed asserts that the process is gone (reaped) after SIGKILL.
func Killed(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if err := syscall.Kill(cmd.Process.Pid, 0); err != syscall.ESRCH {
		t.Fatalf("pid %d still exists after SIGKILL: %v", cmd.Process.Pid, err)
	}
}
