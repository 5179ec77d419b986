package rendezvous

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"tpurun/internal/testutil"

	"go.uber.org/goleak"
)

// The test binary doubles as a node process (rdzvnode, so that tests can SIGKILL a real launcher process) and as
// a server process (rdzvserver, attack_test.go): testutil's fake worker, with these verbs of this package.
func init() {
	testutil.Define(testutil.Verb{Name: "rdzvnode", Run: childNode})
	testutil.Define(testutil.Verb{Name: "rdzvserver", Run: childServer})
}

func TestMain(m *testing.M) {
	testutil.Dispatch()
	code := testutil.Run(m)
	if code == 0 {
		// the in-process etcd members (etcd_test.go) leave idle HTTP peer connections of their own behind; this
		// package uses no net/http, so those are not ours.
		err := goleak.Find(
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
			goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

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
		gen = LatestGeneration
	}
	cfg := Config{Backend: w.Arg, Endpoint: os.Getenv("RDZV_TEST_ENDPOINT"), NNodes: nn, MinNodes: minNodes,
		LastCall: lastCall, NodeRank: rank, Timeout: never(), Heartbeat: hb, RunID: "run", Conf: map[string]string{}}
	if p := os.Getenv("RDZV_TEST_PREFIX"); p != "" {
		cfg.Conf["prefix"] = p
	}
	if cfg.Backend == BackendTCP {
		cfg.Conf["is_host"] = "false"
		if rank == 0 {
			cfg.Conf["is_host"] = "true"
		}
	}
	ctx := context.Background()
	r, err := New(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 3
	}
	s, err := r.Join(ctx, Member{Instance: os.Getenv("RDZV_TEST_INSTANCE"), Host: os.Getenv("RDZV_TEST_HOST"), Addr: "127.0.0.1", LocalWorkers: 4, Accelerator: "v4-32", Rank: rank,
		Generation: gen})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 4
	}
	fmt.Printf("joined %d\n", s.Assignment().NodeRank)
	buf := make([]byte, 1)
	os.Stdin.Read(buf) // block until killed
	return 0
}
