package launcher_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"tpurun/internal/failure"
	"tpurun/internal/proc"
	"tpurun/internal/spec"
	"tpurun/internal/stop"
	"tpurun/internal/testutil"
	"tpurun/launcher"
)

// TestSIGINTDuringFailureTeardownEndsTheRun: one SIGINT while a failed attempt is being torn down (rank 1 ignores
// SIGTERM, so the grace period is running) is a second stop: SIGKILL at once, not after the minute of grace, and
// the run ends (no restart) with the first cause's verdict, rank 0's failure.
func TestSIGINTDuringFailureTeardownEndsTheRun(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	cfg, _, _ := config(t, 2, dir, "ignore:15", testutil.FakeRank(0, "exitready:1"))
	cfg.MaxRestarts = 2
	cfg.Grace = time.Minute
	sigs := make(chan os.Signal, 4)
	cfg.Signals = sigs
	cfg.Observers = []spec.Observer{launcher.InternalObserverFunc(func(e spec.Event) {
		if e.Kind == spec.WorkerFailed { // the supervisor is stopping the group when this returns
			select {
			case sigs <- syscall.SIGINT:
			default:
			}
		}
	})}
	rep, err := launcher.RunInternal(context.Background(), cfg)
	if len(rep.Attempts) != 1 {
		t.Fatalf("%d attempts after a SIGINT during the first one's teardown, want 1 (err %v)", len(rep.Attempts), err)
	}
	var we *proc.WorkerError
	if !errors.As(err, &we) || we.Rank != 0 || failure.ExitCode(err) != 1 {
		t.Fatalf("err %v, want rank 0's failure (exit 1)", err)
	}
	a := rep.Last()
	if a.Verdict.Reason != stop.Failure || a.Verdict.Escalated != "second SIGINT" {
		t.Errorf("attempt verdict %+v, want rank 0's failure, escalated by the second stop (SIGINT)", a.Verdict)
	}
	if r := a.Ranks[1]; r.Signal != syscall.SIGKILL {
		t.Errorf("rank 1 ended %s, want SIGKILL at once (its grace had begun)", r.Ended())
	}
	testutil.AssertAllGone(t, dir, 2)
}

// TestTimeoutDuringFailureTeardownEndsTheRun: --timeout expiring while a failed attempt is in its grace period
// ends the run instead of restarting without a timeout; the verdict is the first cause's, rank 0's failure.
func TestTimeoutDuringFailureTeardownEndsTheRun(t *testing.T) {
	t.Parallel()
	// The failure must come first and the timeout fire in the grace period: rank 0 fails as soon as both workers
	// are set up, which takes far less than the timeout even on a loaded machine (scale it with the knob), and the
	// grace that starts then outlasts the timeout. Rank 1 ignores SIGTERM: the timeout, in the grace, kills it. On a
	// machine so loaded that the set-up outlasts the timeout, the case is not met: again with twice the timeout.
	var rep *spec.Report
	var dir string
	var err error
	for timeout := testutil.Scaled(4 * time.Second); ; timeout *= 2 {
		dir = testutil.FakeDir(t)
		cfg, _, _ := config(t, 2, dir, "ignore:15", testutil.FakeRank(0, "exitready:1"))
		cfg.MaxRestarts = 1
		cfg.Timeout = timeout
		cfg.Grace = cfg.Timeout
		rep, err = launcher.RunInternal(context.Background(), cfg)
		v := rep.Attempts[0].Verdict
		if v.Reason == stop.Failure && v.Failure != nil && v.Failure.Rank == 0 {
			break
		}
		if v.Reason != stop.Timeout || timeout > testutil.Scaled(16*time.Second) {
			t.Fatalf("attempt 0 with --timeout %s: verdict %+v; the case needs rank 0 to fail before the timeout", timeout, v)
		}
		testutil.AssertAllGone(t, dir, 0)
	}
	var we *proc.WorkerError
	if !errors.As(err, &we) || failure.ExitCode(err) != 1 || len(rep.Attempts) != 1 {
		t.Fatalf("err %v (code %d) after %d attempts, want rank 0's failure (1) and no restart", err, failure.ExitCode(err), len(rep.Attempts))
	}
	testutil.AssertAllGone(t, dir, 2)
}

// TestCancelDuringFailureTeardownEndsTheRun: the context canceled while a failed attempt is in its grace period
// ends the run instead of restarting, with the first cause's verdict (rank 0's failure).
func TestCancelDuringFailureTeardownEndsTheRun(t *testing.T) {
	t.Parallel()
	dir := testutil.FakeDir(t)
	cfg, _, _ := config(t, 2, dir, "ignore:15", testutil.FakeRank(0, "exitready:1"))
	cfg.MaxRestarts = 1
	cfg.Grace = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg.Observers = []spec.Observer{launcher.InternalObserverFunc(func(e spec.Event) {
		if e.Kind == spec.WorkerFailed {
			cancel() // the supervisor is stopping the group when this returns
		}
	})}
	rep, err := launcher.RunInternal(ctx, cfg)
	var we *proc.WorkerError
	if !errors.As(err, &we) || we.Rank != 0 || len(rep.Attempts) != 1 {
		t.Fatalf("err %v after %d attempts, want rank 0's failure and no restart", err, len(rep.Attempts))
	}
	testutil.AssertAllGone(t, dir, 2)
}
