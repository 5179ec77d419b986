package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"tpurun/internal/proc"
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

// PIDs lists every fake process that ran, grandchildren included, and is still the process it recorded: a pid whose
// process has exited and whose number a new process took since (pids wrap at pid_max, 32768 by default, and a loaded
// suite starts thousands of processes a minute) is left out, as gone.
func PIDs(t testing.TB, dir string) []int {
	t.Helper()
	recs := records(t, dir)
	var out []int
	for _, r := range recs {
		if !r.reused() {
			out = append(out, r.pid)
		}
	}
	return out
}

// record is a fake process as it recorded itself: its pid and its start time (field 22 of /proc/PID/stat).
type record struct {
	pid   int
	start string
}

// reused reports whether r's pid now names another process: r's own has exited and its pid was given again.
func (r record) reused() bool {
	now := startTime(r.pid)
	return now != "" && r.start != "" && now != r.start
}

func records(t testing.TB, dir string) []record {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(dir, "pids"))
	if err != nil {
		t.Fatal(err)
	}
	var out []record
	for _, e := range es {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(dir, "pids", e.Name()))
		out = append(out, record{pid: pid, start: string(b)})
	}
	return out
}

// AssertAllGone proves that every pid the fakes recorded (at least want of them) is gone: kill(pid, 0) == ESRCH, or
// the pid given to a new process since, within Deadline. Zombies re-parented to this (subreaper) test binary are
// reaped first.
func AssertAllGone(t testing.TB, dir string, want int) {
	t.Helper()
	recs := records(t, dir)
	if len(recs) < want {
		t.Fatalf("only %d fake processes recorded their pid, want at least %d", len(recs), want)
	}
	for _, r := range recs {
		WaitFor(t, fmt.Sprintf("pid %d to be gone (kill(pid, 0) == ESRCH)", r.pid), func() error {
			if err := gone(r.pid); err != nil && !r.reused() {
				return err
			}
			return nil
		})
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
