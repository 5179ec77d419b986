package launcher_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"tpurun/internal/attempt"

	"tpurun/internal/failure"
	"tpurun/internal/proc"
	"tpurun/internal/spec"
	"tpurun/internal/testutil"
	"tpurun/internal/testutil/etcdtest"
	"tpurun/internal/topology"
	"tpurun/launcher"
	"tpurun/rendezvous"
)

// world runs n launchers of one multi-host job in this process (one goroutine each, like n hosts on loopback),
// each with 2 CPU workers doing behaviour, and returns every node's report and error in node order.
type world struct {
	t       *testing.T
	dir     string
	backend string
	ep      string
	specs   []spec.Spec
	sigs    []chan os.Signal
}

func newWorld(t *testing.T, n int, backend, behaviour string, extra ...string) *world {
	t.Helper()
	w := &world{t: t, dir: testutil.FakeDir(t), backend: backend}
	if backend == "etcd" {
		w.ep = etcdtest.StartOne(t)
	} else {
		w.ep = testutil.FreeEndpoint(t)
	}
	for i := range n {
		conf := map[string]string{} // the default heartbeat: these tests are not about noticing a lost node
		if backend == "tcp" {
			conf["is_host"] = strconv.FormatBool(i == 0)
		}
		sig := make(chan os.Signal, 4)
		w.sigs = append(w.sigs, sig)
		w.specs = append(w.specs, spec.Spec{
			Options: attempt.Options{
				Program: []string{testutil.Program(t)},
				Env:     append(append(os.Environ(), "FAKE_DIR="+w.dir, testutil.Fake(behaviour)), extra...),
				Grace:   2 * time.Second,
			},
			Detect:  topology.Options{Device: "cpu"},
			Request: topology.Request{NProcs: 2},
			Rendezvous: spec.RendezvousSpec{
				Config: rendezvous.Config{
					Backend:  backend,
					Endpoint: w.ep,
					RunID:    "world-" + strings.NewReplacer("/", "_").Replace(t.Name()),
					NNodes:   n,
					NodeRank: i,
					Conf:     conf,
					Timeout:  testutil.Deadline(),
				},
				NodeName: "n" + strconv.Itoa(i),
			},
			Stdout:  &testutil.Buffer{},
			Stderr:  &testutil.Buffer{},
			Signals: sig,
			Reap:    true,
		})
	}
	return w
}

// run starts every node (node 0 first, so it hosts the tcp server) and waits for all of them, for Deadline at
// most: a node that never ends fails the test (its workers hang until the launcher stops them).
func (w *world) run() ([]*spec.Report, []error) {
	w.t.Helper()
	reps, errs := make([]*spec.Report, len(w.specs)), make([]error, len(w.specs))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i := range w.specs {
		wg.Go(func() { reps[i], errs[i] = launcher.RunInternal(ctx, w.specs[i]) })
		if i == 0 && w.backend == "tcp" {
			testutil.WaitListening(w.t, w.ep) // node 0 hosts the rendezvous server
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	w.t.Cleanup(func() { cancel(); <-done })
	testutil.Done(w.t, "every node's launcher.Run to return", done)
	return reps, errs
}

// envs reads the env files the "env" fake workers wrote, by global rank.
func (w *world) envs() map[int]map[string]string {
	out := map[int]map[string]string{}
	files, _ := filepath.Glob(filepath.Join(w.dir, "env-*.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			w.t.Fatal(err)
		}
		var d struct{ Env []string }
		if err := json.Unmarshal(b, &d); err != nil {
			w.t.Fatal(err)
		}
		env := map[string]string{}
		for _, kv := range d.Env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		r, _ := strconv.Atoi(env["RANK"])
		out[r] = env
	}
	return out
}

// TestRunMultihostWorld: two nodes agree on one world of 4 ranks, in-process on loopback, on tcp and on a real
// embedded etcd: consecutive global ranks, node 0's MASTER_ADDR/PORT everywhere, the world's sizes.
func TestRunMultihostWorld(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"tcp", "etcd"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, 2, backend, "env")
			for i := range w.specs {
				w.specs[i].LogDir = t.TempDir()
			}
			_, errs := w.run()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("node %d: %v\n%s", i, err, w.specs[i].Stderr)
				}
			}
			envs := w.envs()
			if len(envs) != 4 {
				t.Fatalf("%d ranks wrote their env, want 4", len(envs))
			}
			for r := range 4 {
				e := envs[r]
				if e["WORLD_SIZE"] != "4" || e["GROUP_RANK"] != strconv.Itoa(r/2) || e["LOCAL_RANK"] != strconv.Itoa(r%2) ||
					e["GROUP_WORLD_SIZE"] != "2" || e["MASTER_PORT"] != envs[0]["MASTER_PORT"] || e["MASTER_ADDR"] != "127.0.0.1" ||
					e["TORCHELASTIC_RUN_ID"] != w.specs[0].Rendezvous.RunID {
					t.Fatalf("rank %d env: WORLD_SIZE=%s GROUP_RANK=%s LOCAL_RANK=%s MASTER=%s:%s RUN_ID=%s", r, e["WORLD_SIZE"],
						e["GROUP_RANK"], e["LOCAL_RANK"], e["MASTER_ADDR"], e["MASTER_PORT"], e["TORCHELASTIC_RUN_ID"])
				}
				// torchrun's layout on every node: DIR/<run id>_<random>/attempt_0/<local rank>/error.json.
				want := filepath.Join(runLogDir(t, w.specs[r/2].LogDir, w.specs[0].Rendezvous.RunID), "attempt_0", strconv.Itoa(r%2), "error.json")
				if e["TORCHELASTIC_ERROR_FILE"] != want {
					t.Fatalf("rank %d: TORCHELASTIC_ERROR_FILE=%s, want %s", r, e["TORCHELASTIC_ERROR_FILE"], want)
				}
			}
			testutil.AssertAllGone(t, w.dir, 4)
		})
	}
}

// TestRunMultihostFailureSpreads: rank 3 (node 1) exits 4 while the others hang: every node stops its workers and
// returns the world's verdict — node 1 its own *WorkerError, node 0 a *NodeError naming node 1 — both exit 4.
func TestRunMultihostFailureSpreads(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 2, "tcp", "hang", testutil.FakeRank(3, "exitready:4"))
	_, errs := w.run() // ends only if the failure reaches node 0: its workers hang until it stops them
	var ne *failure.NodeError
	if !errors.As(errs[0], &ne) || ne.Node != 1 || failure.ExitCode(errs[0]) != 4 {
		t.Fatalf("node 0: %v, want a NodeError naming node 1 with code 4", errs[0])
	}
	var we *proc.WorkerError
	if !errors.As(errs[1], &we) || we.Rank != 3 || failure.ExitCode(errs[1]) != 4 {
		t.Fatalf("node 1: %v, want rank 3's WorkerError (exit 4)", errs[1])
	}
	testutil.AssertAllGone(t, w.dir, 4)
}

// TestRunMultihostRestartIsAGeneration: with MaxRestarts 1 a failure restarts the whole world as generation 1:
// every worker of the second attempt sees TORCHELASTIC_RESTART_COUNT=1 and the run succeeds on both nodes.
func TestRunMultihostRestartIsAGeneration(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 2, "tcp", "failuntil:1")
	for i := range w.specs {
		w.specs[i].MaxRestarts = 1
	}
	reps, errs := w.run()
	for i := range 2 {
		if errs[i] != nil || len(reps[i].Attempts) != 2 {
			t.Fatalf("node %d: err %v after %d attempts, want success in the second\n%s", i, errs[i], len(reps[i].Attempts), w.specs[i].Stderr)
		}
	}
	testutil.AssertAllGone(t, w.dir, 4) // a worker stopped before it ran records no pid
}

// TestRunMultihostResultsMerged: on a real etcd, every rank reports one result through the Go client; node 0's
// report holds the world's document with all 4 results and no violation, node 1's none.
func TestRunMultihostResultsMerged(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 2, "etcd", "report")
	for i := range w.specs {
		w.specs[i].Results.Required = true
	}
	reps, errs := w.run()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("errors %v", errs)
	}
	doc := reps[0].Results
	if doc == nil || !doc.OK || len(doc.Results) != 4 || len(doc.Violations) != 0 || doc.World.Size != 4 || doc.World.Nodes != 2 {
		t.Fatalf("node 0's document %+v", doc)
	}
	var reps0 []int
	for _, r := range doc.Results {
		reps0 = append(reps0, r.Replica)
	}
	if !slices.Equal(reps0, []int{0, 1, 2, 3}) || reps[1].Results != nil {
		t.Fatalf("replicas %v; node 1's document %+v", reps0, reps[1].Results)
	}
}

// TestRunMultihostDocumentOnEveryNode: node 0 builds the world's results document; a node whose caller wants it
// (--json: Results.Document; --results: Results.File) gets that same document, e.g. every Ray actor's tpurun.run().
// A node that asks for nothing gets none. Also when a rank fails: the document says so on every node that asked.
func TestRunMultihostDocumentOnEveryNode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, behaviour string
		code            int
	}{{"ok", "report", 0}, {"rank-fails", "report", 6}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var extra []string
			if tc.code != 0 {
				extra = append(extra, testutil.FakeRank(5, "exit:6")) // rank 5, on node 2, fails without reporting
			}
			w := newWorld(t, 3, "tcp", tc.behaviour, extra...)
			for i := range w.specs {
				w.specs[i].Results.Required = true
			}
			w.specs[1].Results.Document = true
			file := filepath.Join(t.TempDir(), "results.json")
			w.specs[2].Results.File = file
			reps, errs := w.run()
			for i, err := range errs {
				if failure.ExitCode(err) != tc.code {
					t.Fatalf("node %d: %v (exit %d), want exit %d", i, err, failure.ExitCode(err), tc.code)
				}
			}
			doc := reps[0].Results
			if doc == nil || doc.ExitCode != tc.code || doc.World.Nodes != 3 || (tc.code == 0 && len(doc.Results) != 6) {
				t.Fatalf("node 0's document %+v", doc)
			}
			want, _ := json.Marshal(doc)
			got1, _ := json.Marshal(reps[1].Results)
			if string(got1) != string(want) {
				t.Fatalf("node 1's document\n%s\nnode 0's\n%s", got1, want)
			}
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("node 2 wrote no results file: %v", err)
			}
			var fromFile, doc0 any
			_ = json.Unmarshal(want, &doc0)
			if err := json.Unmarshal(b, &fromFile); err != nil || !reflect.DeepEqual(fromFile, doc0) {
				t.Fatalf("node 2's results file (%v)\n%s\nnode 0's document\n%s", err, b, want)
			}
			if reps[2].Results == nil {
				t.Fatal("node 2 wrote the file but its report has no document")
			}
		})
	}
}

// TestRunSignalDuringJoin: SIGTERM while waiting for a node that never comes ends the join at once with a
// *SignalError (exit 143), not a rendezvous failure after the timeout; nothing was started.
func TestRunSignalDuringJoin(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 2, "tcp", "exit:0")
	w.specs = w.specs[:1] // node 1 never comes
	done := make(chan error, 1)
	go func() { _, err := launcher.RunInternal(context.Background(), w.specs[0]); done <- err }()
	testutil.WaitListening(t, w.ep) // node 0 hosts the rendezvous server
	w.sigs[0] <- syscall.SIGTERM
	// The join timeout (Deadline, started before) would end the join with a rendezvous error, not a SignalError.
	err := testutil.Done(t, "SIGTERM to end the join", done)
	var se *failure.SignalError
	if !errors.As(err, &se) || failure.ExitCode(err) != 143 {
		t.Fatalf("err %v (exit %d), want a SignalError (143)", err, failure.ExitCode(err))
	}
	if es, _ := os.ReadDir(filepath.Join(w.dir, "pids")); len(es) != 0 {
		t.Fatalf("%d workers started", len(es))
	}
}
