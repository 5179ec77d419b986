package launchertest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// heavySlot is the heavy-test slot of this test binary; heavyLock (a file lock) is the one slot of the whole
// suite, shared by the package test binaries `go test ./...` runs side by side.
var heavySlot = make(chan struct{}, 1)

// heavyLock names the lock file, in the temporary directory every test binary of the machine shares.
func heavyLock() string { return filepath.Join(os.TempDir(), "tpurun-test-heavy.lock") }

// Heavy makes t wait until no other heavy test of the suite runs (in this test binary or in any other that runs
// beside it), and keeps the slot until t and its subtests end. Call it at the start of every test that takes a
// large share of the machine: an embedded etcd, a world of many nodes or hundreds of connections, a flood, a
// memory figure. On two cores, two of them at once starve each other into timeouts that say nothing about the
// code. The time spent waiting is logged.
func Heavy(t testing.TB) {
	t.Helper()
	start := time.Now()
	heavySlot <- struct{}{}
	f, err := os.OpenFile(heavyLock(), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		<-heavySlot
		t.Fatalf("heavy-test lock: %v", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		<-heavySlot
		t.Fatalf("heavy-test lock %s: flock: %v", f.Name(), err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Logf("waited %s for the heavy-test slot (%s)", d.Round(time.Millisecond), f.Name())
	}
	t.Cleanup(func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
		<-heavySlot
	})
}
