package launcher_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"tpurun/internal/attempt"

	"tpurun/internal/console"
	"tpurun/internal/failure"
	"tpurun/internal/proc"
	"tpurun/internal/spec"
	"tpurun/internal/stop"
	"tpurun/internal/testutil"
	"tpurun/internal/topology"
	"tpurun/launcher"
)

// config is a run of n fake workers doing behaviour; extra env entries are appended to the inherited env.
func config(t *testing.T, n int, dir string, behaviour string, extra ...string) (spec.Spec, *testutil.Buffer, *testutil.Buffer) {
	t.Helper()
	plan, err := topology.CPUPlan(n)
	if err != nil {
		t.Fatal(err)
	}
	var out, errb testutil.Buffer
	env := append(os.Environ(), "FAKE_DIR="+dir, testutil.Fake(behaviour))
	s := spec.Spec{ // as tpurun runs
		Options: attempt.Options{
			Program: []string{testutil.Program(t)},
			Env:     append(env, extra...),
			Grace:   5 * time.Second,
		},
		Plan:         plan,
		Stdout:       &out,
		Stderr:       &errb,
		CatchSignals: true,
		Reap:         true,
	}
	return s, &out, &errb
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	for _, code := range []int{0, 1, 85} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			t.Parallel()
			dir := testutil.FakeDir(t)
			behaviour := "exit:0"
			if code != 0 {
				behaviour = "hang" // the others must be stopped by the failure of rank 1
			}
			cfg, _, _ := config(t, 3, dir, behaviour, testutil.FakeRank(1, fmt.Sprintf("exitready:%d", code)))
			rep, err := launcher.RunInternal(context.Background(), cfg)
			if got := failure.ExitCode(err); got != code {
				t.Fatalf("exit code %d, want %d (err %v)", got, code, err)
			}
			if code != 0 {
				var we *proc.WorkerError
				if !errors.As(err, &we) || we.Rank != 1 || we.ExitCode != code {
					t.Fatalf("err = %#v, want a WorkerError for rank 1 code %d", err, code)
				}
				a := rep.Last()
				if a.Verdict.Reason != stop.Failure || a.Verdict.Failure.Rank != 1 {
					t.Fatalf("attempt %+v, want failure of rank 1", a)
				}
				for _, r := range a.Ranks {
					if r.Rank != 1 && r.Signal != syscall.SIGTERM {
						t.Errorf("rank %d ended %s, want SIGTERM from the teardown", r.Rank, r.Ended())
					}
				}
			}
			testutil.AssertAllGone(t, dir, 3)
		})
	}
}

func TestKilledBySignal(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	cfg, _, _ := config(t, 2, dir, "hang", testutil.FakeRank(0, "raise:9"))
	rep, err := launcher.RunInternal(context.Background(), cfg)
	if got := failure.ExitCode(err); got != 128+9 {
		t.Fatalf("exit code %d, want 137 (err %v)", got, err)
	}
	if got := rep.Last().Ranks[0].Ended(); got != "SIGKILL" {
		t.Fatalf("rank 0 ended %q in the report, want SIGKILL", got)
	}
	testutil.AssertAllGone(t, dir, 2)
}

func TestIgnoredSIGTERMEscalatesToSIGKILL(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	cfg, _, _ := config(t, 2, dir, "ignore:15", testutil.FakeRank(0, "exitready:1"))
	cfg.Grace = 300 * time.Millisecond
	start := time.Now()
	rep, err := launcher.RunInternal(context.Background(), cfg)
	if failure.ExitCode(err) != 1 {
		t.Fatalf("err %v, want rank 0's exit 1", err)
	}
	if r := rep.Last().Ranks[1]; r.Signal != syscall.SIGKILL {
		t.Fatalf("rank 1 ended %s, want SIGKILL after the grace period", r.Ended())
	}
	if el := time.Since(start); el < cfg.Grace {
		t.Fatalf("run took %s, less than the grace period %s", el, cfg.Grace)
	}
	testutil.AssertAllGone(t, dir, 2)
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	cfg, _, _ := config(t, 2, dir, "hang")
	cfg.Timeout = testutil.Scaled(5 * time.Second) // after the workers are up, even on a loaded machine
	rep, err := launcher.RunInternal(context.Background(), cfg)
	if !errors.Is(err, failure.ErrTimeout) || failure.ExitCode(err) != 124 {
		t.Fatalf("err %v (code %d), want ErrTimeout and 124", err, failure.ExitCode(err))
	}
	if rep.Last().Verdict.Reason != stop.Timeout {
		t.Fatalf("reason %s, want timeout", rep.Last().Verdict.Reason)
	}
	// A worker stopped while its runtime was still starting (a loaded machine) records no pid: every rank's pid,
	// and every pid recorded, must be gone.
	for _, r := range rep.Last().Ranks {
		if err := syscall.Kill(r.PID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("rank %d pid %d: kill(0) = %v after the run, want ESRCH", r.Rank, r.PID, err)
		}
	}
	testutil.AssertAllGone(t, dir, 0)
}

func TestGrandchildHoldingStdoutDoesNotHang(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	cfg, _, _ := config(t, 2, dir, "child:0")
	done := make(chan error, 1)
	go func() { _, err := launcher.RunInternal(context.Background(), cfg); done <- err }()
	if err := testutil.Done(t, "Run to return while a grandchild holds stdout and fd 3", done); err != nil {
		t.Fatal(err)
	}
	testutil.AssertAllGone(t, dir, 4) // 2 workers + 2 grandchildren
}

// TestOrphanInNewSessionGetsSIGTERMFirst: a worker exits 0 and leaves a helper in a new session (out of its
// group): the helper gets SIGTERM, once, and may exit on it before anything is SIGKILLed (it was SIGKILLed by the
// sweep at once, with no chance to flush). cmd/tpurun's TestFaultWorker/grandchildren-ignore-sigterm has the
// helper that ignores SIGTERM and is swept after the grace.
func TestOrphanInNewSessionGetsSIGTERMFirst(t *testing.T) { // not parallel: no other Run's reaper takes the helper's end
	dir := testutil.FakeDir(t)
	cfg, _, _ := config(t, 1, dir, "childsetsid:0")
	cfg.Reap = false // the helper's end is this test's to see: Run's reaper would reap it first
	rep, err := launcher.RunInternal(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Last().Swept) != 0 {
		t.Fatalf("the sweep SIGKILLed %v, want nothing left for it: the helper ends on its SIGTERM", rep.Last().Swept)
	}
	var helper int
	for _, pid := range testutil.PIDs(t, dir) {
		if pid != rep.Last().Ranks[0].PID {
			helper = pid
		}
	}
	var ws syscall.WaitStatus // the helper was re-parented to this test binary, a subreaper
	if _, err := syscall.Wait4(helper, &ws, 0, nil); err != nil || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("helper %d: wait %v, status %v, want killed by SIGTERM", helper, err, ws)
	}
	testutil.AssertAllGone(t, dir, 2)
}

func TestDrainIsBoundedWhenAnOrphanKeepsThePipes(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	cfg, _, _ := config(t, 1, dir, "childclean:0")
	cfg.DrainTimeout = 200 * time.Millisecond
	done := make(chan error, 1)
	go func() { _, err := launcher.RunInternal(context.Background(), cfg); done <- err }()
	t.Cleanup(func() { // on failure too: the escaped grandchild is nobody's to kill but the test's
		for _, pid := range testutil.PIDs(t, dir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	// DrainTimeout is 200 ms: Run returns then, not when the grandchild (which never exits) closes the pipes.
	if err := testutil.Done(t, "Run to return while an escaped grandchild holds stdout and fd 3", done); err != nil {
		t.Fatal(err)
	}
	// The grandchild shed TPURUN_RUN_ID and left the session: the documented limit of the sweep. Clean up.
	for _, pid := range testutil.PIDs(t, dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	testutil.AssertAllGone(t, dir, 2)
}

func TestTenThousandLinesArePrefixedWholeAndInOrder(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	const n, lines = 4, 10000
	cfg, out, _ := config(t, n, dir, fmt.Sprintf("lines:%d", lines))
	if _, err := launcher.RunInternal(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	next := make([]int, n)
	partial := make([]bool, n)
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		var r, r2, i int
		if _, err := fmt.Sscanf(l, "[%d] rank %d line %d", &r, &r2, &i); err != nil {
			if _, err := fmt.Sscanf(l, "[%d] rank %d partial", &r, &r2); err == nil && r == r2 {
				partial[r] = true
				continue
			}
			t.Fatalf("malformed line %q", l)
		}
		want := fmt.Sprintf("[%d] rank %d line %d %s", r, r, i, strings.Repeat("x", i%50))
		if l != want || i != next[r] {
			t.Fatalf("line %q, want %q as line %d of rank %d", l, want, next[r], r)
		}
		next[r]++
	}
	for r := range n {
		if next[r] != lines || !partial[r] {
			t.Fatalf("rank %d: %d lines, final partial line flushed: %v", r, next[r], partial[r])
		}
	}
	testutil.AssertAllGone(t, dir, n)
}

func TestWorkerEnvironment(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	cfg, _, _ := config(t, 2, dir, "env", "RANK=99", "TPU_VISIBLE_CHIPS=7", "LOCAL_RANK=5")
	cfg.Program = append(cfg.Program, "--port=${local_rank}0")
	cfg.RunID = "envtest"
	rep, err := launcher.RunInternal(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]bool{}
	for r := range 2 {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("env-%d.json", r)))
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Env  []string
			Args []string
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		env := map[string]string{}
		for _, kv := range doc.Env {
			k, v, _ := strings.Cut(kv, "=")
			if _, dup := env[k]; dup {
				t.Errorf("rank %d: %s set twice", r, k)
			}
			env[k] = v
		}
		want := map[string]string{
			"RANK": fmt.Sprint(r), "LOCAL_RANK": fmt.Sprint(r), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
			"GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "ROLE_RANK": fmt.Sprint(r), "ROLE_WORLD_SIZE": "2",
			"ROLE_NAME": "default", "MASTER_ADDR": "127.0.0.1", "TORCHELASTIC_RUN_ID": "envtest",
			"TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0", "OMP_NUM_THREADS": "1",
			"TPURUN_RUN_ID": "envtest", "TPURUN_RESULT_FD": "3", "TPURUN_REPLICAS": fmt.Sprint(r),
			"PJRT_DEVICE": "CPU", "PJRT_LOCAL_PROCESS_RANK": fmt.Sprint(r),
		}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("rank %d: %s=%q, want %q", r, k, env[k], v)
			}
		}
		if _, ok := env["TPU_VISIBLE_CHIPS"]; ok {
			t.Errorf("rank %d inherited the parent's per-rank TPU_VISIBLE_CHIPS", r)
		}
		if env["MASTER_PORT"] == "" || env["MASTER_PORT"] == "0" || env["MASTER_PORT"] == "29500" {
			t.Errorf("MASTER_PORT=%q, want a port picked at launch", env["MASTER_PORT"])
		}
		files[env["TORCHELASTIC_ERROR_FILE"]] = true
		if want := fmt.Sprintf("--port=%d0", r); len(doc.Args) != 1 || doc.Args[0] != want {
			t.Errorf("rank %d args %q, want [%s]", r, doc.Args, want)
		}
	}
	if len(files) != 2 {
		t.Errorf("TORCHELASTIC_ERROR_FILE not per rank: %v", files)
	}
	_ = rep
	testutil.AssertAllGone(t, dir, 2)
}

func TestRestartsIncrementRestartCount(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	cfg, _, _ := config(t, 2, dir, "exit:0", testutil.FakeRank(1, "failuntil:2"))
	cfg.MaxRestarts = 2
	rep, err := launcher.RunInternal(context.Background(), cfg)
	if err != nil {
		t.Fatalf("err %v, want success in the third attempt", err)
	}
	if len(rep.Attempts) != 3 {
		t.Fatalf("%d attempts, want 3", len(rep.Attempts))
	}
	for i, a := range rep.Attempts[:2] {
		if f := a.Verdict.Failure; f == nil || f.Rank != 1 || f.ExitCode != 3 || f.Attempt != i {
			t.Fatalf("attempt %d failure %+v, want rank 1 exit 3", i, a.Verdict.Failure)
		}
	}
	cfg.MaxRestarts = 1
	_, err = launcher.RunInternal(context.Background(), cfg)
	var we *proc.WorkerError
	if !errors.As(err, &we) || we.Attempt != 1 {
		t.Fatalf("err %v, want rank 1 failing in attempt 1 after one restart", err)
	}
	testutil.AssertAllGone(t, dir, 2)
}

func TestRootCauseReportHasStderrAndTraceback(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	cfg, stdout, stderr := config(t, 2, dir, "hang", testutil.FakeRank(1, "record:7"))
	rep, err := launcher.RunInternal(context.Background(), cfg)
	if failure.ExitCode(err) != 7 {
		t.Fatalf("err %v, want 7", err)
	}
	if !strings.Contains(stderr.String(), "[1] ValueError: bad learning rate\n") {
		t.Fatalf("stderr not forwarded with its prefix:\n%s", stderr.String())
	}
	if strings.Contains(stdout.String(), "ValueError") {
		t.Fatalf("stderr leaked into stdout:\n%s", stdout.String())
	}
	s := rep.Last().Failed()
	if s == nil || s.Rank != 1 || s.Ended() != "exit 7" {
		t.Fatalf("root cause %+v, want rank 1 exit 7", s)
	}
	if tail := strings.Join(s.StderrTail, "\n"); !strings.Contains(tail, "ValueError: bad learning rate") {
		t.Errorf("rank 1's stderr tail lacks its last line:\n%s", tail)
	}
	if s.Error == nil || !strings.Contains(s.Error.Traceback, `File "train.py", line 3, in main`) {
		t.Errorf("rank 1's error record lacks the traceback: %+v", s.Error)
	}
	testutil.AssertAllGone(t, dir, 2)
}

func TestForwardedSignals(t *testing.T) {
	t.Parallel()
	t.Run("SIGUSR1 reaches every worker", func(t *testing.T) {
		t.Parallel()
		dir := testutil.FakeDir(t)
		cfg, out, _ := config(t, 2, dir, "catch:10") // exit 0 on SIGUSR1
		sigs := make(chan os.Signal, 1)
		cfg.Signals = sigs
		go waitReady(t, dir, 2, func() { sigs <- syscall.SIGUSR1 })
		if _, err := launcher.RunInternal(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
		if c := strings.Count(out.String(), "caught SIGUSR1"); c != 2 {
			t.Fatalf("%d workers got SIGUSR1, want 2:\n%s", c, out.String())
		}
		testutil.AssertAllGone(t, dir, 2)
	})
	t.Run("SIGTERM stops the run with 143", func(t *testing.T) {
		t.Parallel()
		dir := testutil.FakeDir(t)
		cfg, _, _ := config(t, 2, dir, "hang")
		sigs := make(chan os.Signal, 1)
		cfg.Signals = sigs
		go waitReady(t, dir, 2, func() { sigs <- syscall.SIGTERM })
		rep, err := launcher.RunInternal(context.Background(), cfg)
		if failure.ExitCode(err) != 143 || rep.Last().Verdict.Reason != stop.Signal {
			t.Fatalf("err %v reason %s, want 143 after SIGTERM", err, rep.Last().Verdict.Reason)
		}
		testutil.AssertAllGone(t, dir, 2)
	})
	t.Run("second SIGTERM kills at once", func(t *testing.T) {
		t.Parallel()
		dir := testutil.FakeDir(t)
		cfg, _, _ := config(t, 2, dir, "ignore:15")
		cfg.Grace = time.Hour
		sigs := make(chan os.Signal, 2)
		cfg.Signals = sigs
		go waitReady(t, dir, 2, func() { sigs <- syscall.SIGTERM; sigs <- syscall.SIGTERM })
		rep, err := launcher.RunInternal(context.Background(), cfg)
		if v := rep.Last().Verdict; failure.ExitCode(err) != 143 || rep.Last().Ranks[0].Signal != syscall.SIGKILL || v.Escalated != "second SIGTERM" {
			t.Fatalf("err %v (escalated %q), want the run stopped by SIGTERM (143) and the workers SIGKILLed by the second", err, v.Escalated)
		}
		testutil.AssertAllGone(t, dir, 2)
	})
}

// waitReady calls f once n fake workers have marked themselves ready (every worker has its signal handling set
// up), in a goroutine of its own while Run runs in the test's.
func waitReady(t *testing.T, dir string, n int, f func()) {
	if err := testutil.PollReady(dir, n); err != nil {
		t.Error(err)
		return
	}
	f()
}

func TestSixtyFourWorkers(t *testing.T) {
	t.Parallel()
	testutil.Heavy(t) // 64 processes at once
	dir := testutil.FakeDir(t)
	cfg, _, _ := config(t, 64, dir, "exit:0")
	rep, err := launcher.RunInternal(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Last().Ranks) != 64 {
		t.Fatalf("%d ranks reported, want 64", len(rep.Last().Ranks))
	}
	for _, r := range rep.Last().Ranks {
		if r.ExitCode != 0 || r.PID == 0 || r.MaxRSS == 0 {
			t.Fatalf("rank %+v: want exit 0 with a pid and a peak RSS from rusage", r)
		}
	}
	testutil.AssertAllGone(t, dir, 64)
}

// TestResultChannel: every worker's fd 3 is its private result channel: good frames become the results document,
// raw bytes a malformed_frame violation of that rank (exit 65), and a required result that never came is missing.
func TestResultChannel(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	cfg, _, _ := config(t, 2, dir, "report")
	cfg.Results.Required = true
	rep, err := launcher.RunInternal(context.Background(), cfg)
	if err != nil || rep.Results == nil || len(rep.Results.Results) != 2 || !rep.Results.OK {
		t.Fatalf("err %v, document %+v", err, rep.Results)
	}
	for r, res := range rep.Results.Results {
		want, _ := json.Marshal(testutil.Value(r, r))
		if res.Replica != r || res.Rank != r || string(res.Value) != string(want) {
			t.Fatalf("replica %d: %+v", r, res)
		}
	}
	cfg, _, _ = config(t, 2, dir, "result", testutil.FakeRank(1, "exit:0"))
	cfg.Results.Required = true
	rep, err = launcher.RunInternal(context.Background(), cfg)
	var re *failure.ResultsError
	if !errors.As(err, &re) || !errors.Is(err, failure.ErrResults) || failure.ExitCode(err) != failure.ExitResults {
		t.Fatalf("err %v, want a ResultsError mapped to %d", err, failure.ExitResults)
	}
	kinds := map[string]int{}
	for _, v := range rep.Results.Violations {
		kinds[v.Kind]++
	}
	if kinds["malformed_frame"] != 1 || kinds["missing_result"] < 1 || rep.Results.ExitCode != failure.ExitResults {
		t.Fatalf("violations %+v, exit %d", rep.Results.Violations, rep.Results.ExitCode)
	}
	testutil.AssertAllGone(t, dir, 4)
}

func TestLogDirRedirectsAndFilter(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	cfg, out, _ := config(t, 3, dir, "lines:3")
	cfg.LogDir = t.TempDir()
	cfg.RunID = "logs"
	cfg.Redirects = console.StdSpec{PerRank: map[int]console.Std{1: console.StdOut}}
	cfg.LocalRanksFilter = []int{0, 1}
	cfg.LogPrefix = "<{node}:{rank}> "
	if _, err := launcher.RunInternal(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "<0:0> rank 0 line 2") {
		t.Fatalf("rank 0 missing from the console:\n%s", out.String())
	}
	if strings.Contains(out.String(), "rank 1 ") || strings.Contains(out.String(), "rank 2 ") {
		t.Fatalf("redirected rank 1 or filtered rank 2 on the console:\n%s", out.String())
	}
	for r := range 3 {
		b, err := os.ReadFile(filepath.Join(runLogDir(t, cfg.LogDir, "logs"), "attempt_0", fmt.Sprint(r), "stdout.log"))
		if err != nil || !strings.HasPrefix(string(b), fmt.Sprintf("rank %d line 0 \n", r)) {
			t.Fatalf("rank %d log file: %q %v", r, b, err)
		}
	}
	testutil.AssertAllGone(t, dir, 3)
}

// runLogDir is the one directory of run id below logDir: torchrun's <run-id>_<random>.
func runLogDir(t *testing.T, logDir, runID string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(logDir, runID+"_*"))
	if err != nil || len(m) != 1 {
		t.Fatalf("run directories of %q in %s: %v (%v), want exactly one", runID, logDir, m, err)
	}
	return m[0]
}

// TestLogDirLayoutIsTorchruns: --log-dir holds <run-id>_<random>/attempt_<n>/<local rank>/ as torchrun's does;
// two runs with one run id keep both runs' files, and each attempt has its own directory.
func TestLogDirLayoutIsTorchruns(t *testing.T) {
	t.Parallel()
	plan, err := topology.CPUPlan(2)
	if err != nil {
		t.Fatal(err)
	}
	logs := t.TempDir()
	for run := range 2 {
		// Attempt 0 fails (rank 0, once rank 1's line is in its log file), attempt 1 succeeds.
		script := `echo "run ` + fmt.Sprint(run) + ` attempt $TORCHELASTIC_RESTART_COUNT rank $RANK"
[ "$TORCHELASTIC_RESTART_COUNT" = 1 ] || [ "$RANK" = 1 ] && exit 0
until [ -s "$(dirname "$TORCHELASTIC_ERROR_FILE")/../1/stdout.log" ]; do sleep 0.01; done
exit 1`
		_, err := launcher.RunInternal(context.Background(), spec.Spec{
			Options: attempt.Options{
				Program:     []string{"/bin/sh", "-c", script},
				MaxRestarts: 1,
				Grace:       5 * time.Second,
				LogDir:      logs,
				RunID:       "same",
			},
			Plan:   plan,
			Reap:   true,
			Stdout: io.Discard,
			Stderr: io.Discard,
		})
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
	}
	runs, _ := filepath.Glob(filepath.Join(logs, "same_*"))
	if es, _ := os.ReadDir(logs); len(runs) != 2 || len(es) != 2 {
		t.Fatalf("log dir holds %v; want two run directories same_<random>", es)
	}
	seen := map[string]bool{}
	for _, d := range runs {
		for a := range 2 {
			for lr := range 2 {
				b, err := os.ReadFile(filepath.Join(d, fmt.Sprintf("attempt_%d", a), fmt.Sprint(lr), "stdout.log"))
				if err != nil {
					t.Fatal(err)
				}
				seen[strings.TrimSpace(string(b))] = true
			}
		}
	}
	for run := range 2 {
		for a := range 2 {
			for r := range 2 {
				if l := fmt.Sprintf("run %d attempt %d rank %d", run, a, r); !seen[l] {
					t.Fatalf("no log file holds %q; have %v", l, seen)
				}
			}
		}
	}
}

// TestProgramNotRunnable: a PROGRAM that is not there exits 127 and one that cannot be executed 126, as a shell's,
// before anything starts.
func TestProgramNotRunnable(t *testing.T) {
	t.Parallel()
	plan, _ := topology.CPUPlan(1)
	noexec := filepath.Join(t.TempDir(), "train.sh")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for prog, want := range map[string]int{"/nonexistent/program": failure.ExitNotFound, "no-such-program-on-path": failure.ExitNotFound,
		noexec: failure.ExitNotExecutable} {
		_, err := launcher.RunInternal(context.Background(), spec.Spec{
			Options: attempt.Options{Program: []string{prog}},
			Plan:    plan,
			Reap:    true,
		})
		var pe *failure.ProgramError
		if !errors.As(err, &pe) || failure.ExitCode(err) != want {
			t.Errorf("%s: err %v (exit %d), want a ProgramError exiting %d", prog, err, failure.ExitCode(err), want)
		}
	}
}

func TestConfigErrorsStartNothing(t *testing.T) {
	t.Parallel()
	plan, _ := topology.CPUPlan(1)
	for name, cfg := range map[string]spec.Spec{
		"no program": {Plan: plan},
		"negative": {
			Plan:    plan,
			Options: attempt.Options{Program: []string{testutil.Program(t)}, Grace: -time.Second},
		},
		"bad node rank": {
			Plan:     plan,
			Options:  attempt.Options{Program: []string{testutil.Program(t)}},
			NodeRank: 3,
		},
	} {
		_, err := launcher.RunInternal(context.Background(), cfg)
		var ce *failure.ConfigError
		if !errors.As(err, &ce) || failure.ExitCode(err) != failure.ExitUsage {
			t.Errorf("%s: err %v, want a ConfigError (exit 2)", name, err)
		}
	}
}

func TestLiveSamplesAndCancel(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	cfg, _, _ := config(t, 2, dir, "hang")
	cfg.SampleInterval = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	cfg.Observers = []spec.Observer{launcher.InternalObserverFunc(func(e spec.Event) {
		if e.Kind != spec.Sampled {
			return
		}
		s := e.Samples
		live := 0
		for _, x := range s {
			if x.RSS > 0 && x.PeakRSS >= x.RSS {
				live++
			}
		}
		if es, _ := os.ReadDir(filepath.Join(dir, "ready")); live == 2 && len(es) == 2 {
			once.Do(cancel)
		}
	})}
	rep, err := launcher.RunInternal(ctx, cfg)
	if !errors.Is(err, context.Canceled) || rep.Last().Verdict.Reason != stop.Canceled {
		t.Fatalf("err %v, want context.Canceled after both workers were sampled", err)
	}
	for _, r := range rep.Last().Ranks {
		if r.Sampled.PeakRSS == 0 {
			t.Errorf("rank %d: no live sample in the report", r.Rank)
		}
	}
	testutil.AssertAllGone(t, dir, 2)
}

// TestStaleErrorFileIsNotTheRootCause: every run has a new log directory, but a worker can write below it: a
// rank of attempt 0 that leaves a traceback at attempt 1's error file path must not have it reported as attempt
// 1's root cause when that rank fails without writing one.
func TestStaleErrorFileIsNotTheRootCause(t *testing.T) {
	t.Parallel()
	plan, err := topology.CPUPlan(2)
	if err != nil {
		t.Fatal(err)
	}
	// $TORCHELASTIC_ERROR_FILE is DIR/<run>_<random>/attempt_<n>/<local rank>/error.json.
	script := `run=$(dirname "$(dirname "$(dirname "$TORCHELASTIC_ERROR_FILE")")")
[ "$LOCAL_RANK" = 0 ] && exec sleep 30
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  mkdir -p "$run/attempt_1/1" &&
  echo '{"message": {"message": "ValueError: bad learning rate", "extraInfo": {"py_callstack": "ValueError: bad learning rate", "timestamp": "1"}}}' > "$run/attempt_1/1/error.json"
  exit 3
fi
exit 5`
	var out strings.Builder
	rep, err := launcher.RunInternal(context.Background(), spec.Spec{
		Options: attempt.Options{
			Program:     []string{"/bin/sh", "-c", script},
			MaxRestarts: 1,
			Grace:       5 * time.Second,
			LogDir:      t.TempDir(),
			RunID:       "fixed-run-id",
		},
		Plan:   plan,
		Reap:   true,
		Stdout: io.Discard,
		Stderr: &out,
	})
	if failure.ExitCode(err) != 5 || len(rep.Attempts) != 2 {
		t.Fatalf("err %v after %d attempts, want rank 1's exit 5 in attempt 1\n%s", err, len(rep.Attempts), out.String())
	}
	if rec := rep.Last().Ranks[1].Error; rec != nil {
		t.Fatalf("attempt 1 reports the file attempt 0 left as rank 1's error: %+v", rec)
	}

}

// TestSameRunIDDoesNotSweepAnotherLaunchersWorkers: two launchers with one run id and the sweep by environment
// (no reaper: library use or --no-subreaper): the one that ends first must not kill the other's workers.
func TestSameRunIDDoesNotSweepAnotherLaunchersWorkers(t *testing.T) {
	t.Parallel()
	dirA := testutil.FakeDir(t)
	cfgA, _, _ := config(t, 2, dirA, "hang")
	cfgA.RunID = "shared-run-id"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type outcome struct {
		rep *spec.Report
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		rep, err := launcher.RunInternal(ctx, cfgA)
		done <- outcome{rep, err}
	}()
	t.Cleanup(func() { cancel(); <-done })
	testutil.WaitReady(t, dirA, 2)

	dirB := testutil.FakeDir(t)
	cfgB, _, _ := config(t, 1, dirB, "exit:0")
	cfgB.RunID = "shared-run-id"
	repB, err := launcher.RunInternal(context.Background(), cfgB)
	if err != nil {
		t.Fatalf("launcher B: %v", err)
	}
	cancel() // B's sweep is over: A's workers must still be alive and stop on A's SIGTERM
	a := <-done
	done <- a // for the cleanup
	if !errors.Is(a.err, context.Canceled) {
		t.Fatalf("launcher A: err %v, want context.Canceled (its workers killed by B's sweep: %v)", a.err, repB.Last().Swept)
	}
	for _, r := range a.rep.Last().Ranks {
		if r.Signal != syscall.SIGTERM {
			t.Errorf("launcher A's rank %d ended %s, want SIGTERM from A's own stop", r.Rank, r.Ended())
		}
	}
	testutil.AssertAllGone(t, dirA, 2)
	testutil.AssertAllGone(t, dirB, 1)
}
