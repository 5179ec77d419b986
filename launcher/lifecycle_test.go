package launcher_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"tpurun/internal/failure"
	"tpurun/internal/spec"
	"tpurun/internal/testutil"
	"tpurun/internal/testutil/etcdtest"
	"tpurun/launcher"
	"tpurun/rendezvous"
)

func init() { testutil.Define(etcdtest.ProcessVerb) } // TestRunMultihostEtcdLost's etcd

// The multi-host job's whole life (rendezvous package doc, "Lifecycle"): a node that arrives after the world
// started and waits for the next generation learns that the job closed; nodes that disagree on the world's size
// fail at once; a lost etcd ends the job like a lost node; a finished job's run id can be used again.

// logTo is a logger writing to buf, shared by the nodes of a test: the events it waits for are log lines.
func logTo(buf *testutil.Buffer) *zap.Logger {
	return zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.AddSync(buf), zap.InfoLevel))
}

// start runs node i's launcher in the background; wait returns its report and error, failing the test when it
// has not returned within testutil.Deadline (the run is cancelled at cleanup).
func (w *world) start(i int) (wait func() (*spec.Report, error)) {
	var rep *spec.Report
	var err error
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(done)
		rep, err = launcher.RunInternal(ctx, w.specs[i])
	}()
	w.t.Cleanup(func() { cancel(); <-done })
	return func() (*spec.Report, error) {
		w.t.Helper()
		testutil.Done(w.t, fmt.Sprintf("node %d's launcher.Run to return", i), done)
		return rep, err
	}
}

// onEtcd moves a world made for tcp onto the etcd at ep.
func onEtcd(w *world, ep string) *world {
	w.backend, w.ep = "etcd", ep
	for i := range w.specs {
		w.specs[i].Rendezvous.Backend, w.specs[i].Rendezvous.Endpoint, w.specs[i].Rendezvous.Conf = "etcd", ep,
			map[string]string{"heartbeat": "2s"}
	}
	return w
}

// TestRunMultihostLateNodeAfterSuccess: an elastic world (2..3 nodes) starts with n0 and n1; n2 arrives while
// their workers run and waits for the next generation; the job succeeds. n2 learns that the job closed and ends
// with exit 0 and "job <id> already finished (generation 0, exit 0)", on tcp and on a real etcd. (It exited 69,
// "rendezvous server lost ... (node 0 gone?)", on tcp, and waited out its join timeout on etcd.)
func TestRunMultihostLateNodeAfterSuccess(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"tcp", "etcd"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, 3, backend, "catch:15") // the workers run until they get SIGTERM, then exit 0
			logs := &testutil.Buffer{}
			for i := range w.specs {
				r := &w.specs[i].Rendezvous
				r.MinNodes, r.Conf["last_call_timeout"] = 2, "0.3"
				w.specs[i].Logger = logTo(logs)
			}
			w.specs[2].Rendezvous.NodeRank = -1 // an elastic world's ranks from 2 up are given, not asked for
			wait0 := w.start(0)
			if backend == "tcp" {
				testutil.WaitListening(t, w.ep) // node 0 hosts the rendezvous server
			}
			wait1 := w.start(1)
			testutil.WaitReady(t, w.dir, 4)
			wait2 := w.start(2)
			logs.WaitFor(t, "waits for the world to restart") // n2, in generation 1 (its join timeout: Deadline)
			for _, pid := range testutil.PIDs(t, w.dir) {     // n0's and n1's workers: the job succeeds
				if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			for i, wait := range []func() (*spec.Report, error){wait0, wait1} {
				if _, err := wait(); err != nil {
					t.Fatalf("node %d: %v\n%s", i, err, logs)
				}
			}
			rep, err := wait2()
			want := "job " + w.specs[0].Rendezvous.RunID + " already finished (generation 0, exit 0)"
			if code := failure.ExitCode(err); code != 0 || !errors.Is(err, rendezvous.ErrJobClosed) || !strings.Contains(err.Error(), want) {
				t.Fatalf("late node: %v (exit %d), want exit 0 and %q\n%s", err, code, want, logs)
			}
			if len(rep.Attempts) != 0 {
				t.Fatalf("the late node ran %d attempts", len(rep.Attempts))
			}
			testutil.AssertAllGone(t, w.dir, 4)
		})
	}
}

// TestRunMultihostWorldSizeMismatch: two nodes asking for different world sizes (--nnodes 2 against 3, 2:3 against
// 2:4) both fail at once (their join timeout is past the test's deadline), with exit 69 and an error naming both sizes and the node
// that gave each, on tcp and on a real etcd; nothing starts. (Node 0 waited out the join timeout on tcp, saying a
// node never arrived; on etcd both ran a world of 2.)
func TestRunMultihostWorldSizeMismatch(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"tcp", "etcd"} {
		for _, tc := range []struct {
			name       string
			min, nodes [2]int
			values     [2]string
		}{{"fixed", [2]int{0, 0}, [2]int{2, 3}, [2]string{`"2" from`, `"3" from`}},
			{"elastic", [2]int{2, 2}, [2]int{3, 4}, [2]string{`"2..3" from`, `"2..4" from`}}} {
			t.Run(backend+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				w := newWorld(t, 2, backend, "exit:0")
				for i := range w.specs {
					r := &w.specs[i].Rendezvous
					r.MinNodes, r.NNodes, r.Timeout = tc.min[i], tc.nodes[i], 2*testutil.Deadline()
				}
				_, errs := w.run() // within Deadline, or it fails
				for i, err := range errs {
					msg := ""
					if err != nil {
						msg = err.Error()
					}
					if failure.ExitCode(err) != failure.ExitRendezvous || !errors.Is(err, rendezvous.ErrMismatch) ||
						!strings.Contains(msg, "node count") || !strings.Contains(msg, tc.values[0]) || !strings.Contains(msg, tc.values[1]) ||
						!strings.Contains(msg, `"n0"`) || !strings.Contains(msg, `"n1"`) {
						t.Fatalf("node %d: %v (exit %d), want exit 69 naming %s and %s and both nodes", i, err, failure.ExitCode(err), tc.values[0], tc.values[1])
					}
				}
				if es, _ := os.ReadDir(filepath.Join(w.dir, "pids")); len(es) != 0 {
					t.Fatalf("%d workers started in a world that disagrees", len(es))
				}
			})
		}
	}
}

// TestRunMultihostEtcdLost: etcd, a process of its own, is SIGKILLed while every worker runs: each node notices
// within a few heartbeats (its lease cannot be kept alive), stops its workers and ends with exit 69 naming the
// endpoint, as for a lost node. (The nodes hung for five minutes, past the test's deadline.)
func TestRunMultihostEtcdLost(t *testing.T) {
	t.Parallel()
	ep, etcd := etcdtest.StartProcess(t)
	w := onEtcd(newWorld(t, 2, "tcp", "hang"), ep)
	waits := []func() (*spec.Report, error){w.start(0), w.start(1)}
	testutil.WaitReady(t, w.dir, 4)
	if err := etcd.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	errs := make([]error, 2)
	for i, wait := range waits {
		_, errs[i] = wait()
	}
	took := time.Since(killed)
	for i, err := range errs {
		if failure.ExitCode(err) != failure.ExitRendezvous || !errors.Is(err, rendezvous.ErrStoreLost) || !strings.Contains(err.Error(), ep) {
			t.Fatalf("node %d: %v (exit %d), want exit 69 naming the lost etcd at %s", i, err, failure.ExitCode(err), ep)
		}
	}
	t.Logf("both nodes ended %s after etcd was killed (heartbeat 2s)", took.Round(time.Millisecond))
	testutil.AssertAllGone(t, w.dir, 4)
}

// TestRunMultihostReusedRunID: a 2-node job on etcd fails once and restarts (generations 0 and 1) and succeeds;
// its keys vanish once its nodes are done (linger: one heartbeat); the same job run again under the same run id
// starts fresh at generation 0 (TORCHELASTIC_RESTART_COUNT=0 on every rank). (The first job's "latest" key
// survived it, and the second started at generation 2.)
func TestRunMultihostReusedRunID(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 2, "etcd", "failuntil:1")
	for i := range w.specs {
		w.specs[i].MaxRestarts = 1
	}
	reps, errs := w.run()
	for i := range 2 {
		if errs[i] != nil || len(reps[i].Attempts) != 2 {
			t.Fatalf("first job, node %d: err %v after %d attempts, want success in the second", i, errs[i], len(reps[i].Attempts))
		}
	}
	// a job's state does not outlive the job: wait for its keys to vanish (they live on the job's lease)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{w.ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	prefix := "/tpurun/rdzv/" + w.specs[0].Rendezvous.RunID + "/"
	testutil.Eventually(t, "the first job's keys under "+prefix+" to vanish once its nodes are done", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && r.Count == 0
	})

	again := onEtcd(newWorld(t, 2, "tcp", "env"), w.ep)
	for i := range again.specs {
		again.specs[i].MaxRestarts = 1
	}
	reps, errs = again.run()
	for i := range 2 {
		if errs[i] != nil || len(reps[i].Attempts) != 1 {
			t.Fatalf("second job, node %d: err %v after %d attempts", i, errs[i], len(reps[i].Attempts))
		}
	}
	envs := again.envs()
	for r := range 4 {
		if got := envs[r]["TORCHELASTIC_RESTART_COUNT"]; got != "0" {
			t.Fatalf("second job, rank %d: TORCHELASTIC_RESTART_COUNT=%q, want 0 (a fresh job)", r, got)
		}
	}
}
