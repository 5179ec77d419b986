package launchertest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"tpurun/launcher/proc"
)

// SetSubreaper makes the test binary the child subreaper (proc.SetSubreaper), so orphaned grandchildren are
// re-parented to it and AssertAllGone can reap them and prove kill(pid, 0) == ESRCH even where PID 1 does not reap.
func SetSubreaper() error { return proc.SetSubreaper() }

// FakeDir makes the directory fake workers report into (FAKE_DIR): pids/, ready/ and gc/ (grandchildren).
func FakeDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	for _, s := range []string{"pids", "ready", "gc"} {
		if err := os.Mkdir(filepath.Join(d, s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// PIDs lists every fake process that ran, grandchildren included.
func PIDs(t testing.TB, dir string) []int {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(dir, "pids"))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range es {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pid)
	}
	return out
}

// AssertAllGone proves that every pid the fakes recorded (at least want of them) is gone: kill(pid, 0) == ESRCH
// within Deadline. Zombies re-parented to this (subreaper) test binary are reaped first.
func AssertAllGone(t testing.TB, dir string, want int) {
	t.Helper()
	ps := PIDs(t, dir)
	if len(ps) < want {
		t.Fatalf("only %d fake processes recorded their pid, want at least %d", len(ps), want)
	}
	for _, pid := range ps {
		WaitGone(t, pid)
	}
}

// WaitReady waits until n fake workers have marked themselves ready.
func WaitReady(t testing.TB, dir string, n int) {
	t.Helper()
	if err := PollReady(dir, n); err != nil {
		t.Fatal(err)
	}
}

// PollReady is WaitReady for a goroutine other than the test's.
func PollReady(dir string, n int) error {
	return Poll(fmt.Sprintf("%d fake workers ready in %s", n, dir), func() error {
		es, _ := os.ReadDir(filepath.Join(dir, "ready"))
		if len(es) >= n {
			return nil
		}
		return fmt.Errorf("%d ready", len(es))
	})
}

// Go lets the workers doing exitongo exit: it writes $FAKE_DIR/go.
func Go(t testing.TB, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}
