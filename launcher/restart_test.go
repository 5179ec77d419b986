package launcher_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"tpurun/launcher"
	"tpurun/launcher/launchertest"
)

// TestSIGINTDuringFailureTeardownEndsTheRun: one SIGINT while a failed attempt is being torn down (rank 1 ignores
// SIGTERM, so the grace period is running) is forwarded, recorded and ends the run: no restart, and no "second
// SIGINT" kill.
func TestSIGINTDuringFailureTeardownEndsTheRun(t *testing.T) {
	t.Parallel()
	dir := launchertest.FakeDir(t)
	cfg, _, _ := config(t, 2, dir, "ignore:15", launchertest.FakeRank(0, "exitready:1"))
	cfg.MaxRestarts = 2
	cfg.Grace = time.Minute
	sigs := make(chan os.Signal, 4)
	cfg.Signals = sigs
	cfg.Observers = []launcher.Observer{launcher.ObserverFunc(func(e launcher.Event) {
		if e.Kind == launcher.WorkerFailed { // the supervisor is stopping the group when this returns
			select {
			case sigs <- syscall.SIGINT:
			default:
			}
		}
	})}
	rep, err := launcher.Run(context.Background(), cfg)
	if len(rep.Attempts) != 1 {
		t.Fatalf("%d attempts after a SIGINT during the first one's teardown, want 1 (err %v)", len(rep.Attempts), err)
	}
	var we *launcher.WorkerError
	if !errors.As(err, &we) || we.Rank != 0 || launcher.ExitCode(err) != 1 {
		t.Fatalf("err %v, want rank 0's failure (exit 1)", err)
	}
	a := rep.Last()
	if a.Signal != syscall.SIGINT {
		t.Errorf("attempt signal %v, want SIGINT recorded", a.Signal)
	}
	if r := a.Ranks[1]; r.Signal != syscall.SIGINT {
		t.Errorf("rank 1 ended %s, want SIGINT forwarded (not a second-signal SIGKILL)", r.Ended())
	}
	launchertest.AssertAllGone(t, dir, 2)
}

// TestTimeoutDuringFailureTeardownEndsTheRun: --timeout expiring while a failed attempt is in its grace period
// ends the run with ErrTimeout instead of restarting without a timeout.
func TestTimeoutDuringFailureTeardownEndsTheRun(t *testing.T) {
	t.Parallel()
	dir := launchertest.FakeDir(t)
	cfg, _, _ := config(t, 2, dir, "ignore:15", launchertest.FakeRank(0, "exitready:1"))
	cfg.MaxRestarts = 1
	// The failure must come first and the timeout fire in the grace period: rank 0 fails as soon as both workers
	// are set up, which takes far less than the timeout even on a loaded machine (scale it with the knob), and the
	// grace that starts then outlasts the timeout. Rank 1 ignores SIGTERM: the run lasts the whole grace.
	cfg.Timeout = launchertest.Scaled(4 * time.Second)
	cfg.Grace = cfg.Timeout
	rep, err := launcher.Run(context.Background(), cfg)
	if a := rep.Attempts[0]; a.Reason != launcher.StopFailure || a.Failure == nil || a.Failure.Rank != 0 {
		t.Fatalf("attempt 0: reason %s failure %v; the case needs rank 0 to fail before the timeout", a.Reason, a.Failure)
	}
	if !errors.Is(err, launcher.ErrTimeout) || launcher.ExitCode(err) != launcher.ExitTimeout || len(rep.Attempts) != 1 {
		t.Fatalf("err %v (code %d) after %d attempts, want ErrTimeout (124) and no restart", err, launcher.ExitCode(err), len(rep.Attempts))
	}
	launchertest.AssertAllGone(t, dir, 2)
}

// TestCancelDuringFailureTeardownEndsTheRun: the context canceled while a failed attempt is in its grace period
// ends the run with the context's error instead of restarting.
func TestCancelDuringFailureTeardownEndsTheRun(t *testing.T) {
	t.Parallel()
	dir := launchertest.FakeDir(t)
	cfg, _, _ := config(t, 2, dir, "ignore:15", launchertest.FakeRank(0, "exitready:1"))
	cfg.MaxRestarts = 1
	cfg.Grace = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg.Observers = []launcher.Observer{launcher.ObserverFunc(func(e launcher.Event) {
		if e.Kind == launcher.WorkerFailed {
			cancel() // the supervisor is stopping the group when this returns
		}
	})}
	rep, err := launcher.Run(ctx, cfg)
	if !errors.Is(err, context.Canceled) || len(rep.Attempts) != 1 {
		t.Fatalf("err %v after %d attempts, want context.Canceled and no restart", err, len(rep.Attempts))
	}
	launchertest.AssertAllGone(t, dir, 2)
}
