package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// heavySlot is the heavy-test slot of this test binary; heavyLock (a file lock) is the one slot of the whole
// suite, shared by the package test binaries `go test ./...` runs side by side: their parent is that go command,
// which names the lock. Another suite on the same machine (another checkout, another user) has a slot of its own:
// its tests are load for this one, and a long heavy test there never stalls a test here.
var heavySlot = make(chan struct{}, 1)

// heavyHolder is the test holding this binary's slot, so that a second Heavy of the same test (an etcd and a
// world of many nodes) does not wait for itself.
var (
	heavyMu     sync.Mutex
	heavyHolder testing.TB
)

// heavyLock names the lock file of this suite: tpurun-test-heavy-<pid>-<start>.lock in the temporary directory,
// for the parent process (the go command) and its start time (pids are reused). Files of suites that have ended
// are removed.
var heavyLock = sync.OnceValue(func() string {
	removeStaleLocks()
	ppid := os.Getppid()
	return filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-%s.lock", heavyPrefix, ppid, startTime(ppid)))
})

const heavyPrefix = "tpurun-test-heavy-"

// removeStaleLocks removes the lock files whose go command is gone.
func removeStaleLocks() {
	files, _ := filepath.Glob(filepath.Join(os.TempDir(), heavyPrefix+"*.lock"))
	for _, f := range files {
		pid, start, ok := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), heavyPrefix), ".lock"), "-")
		if n, err := strconv.Atoi(pid); ok && err == nil && startTime(n) != start {
			_ = os.Remove(f)
		}
	}
}

// startTime is field 22 of /proc/<pid>/stat (when pid started, in clock ticks since boot), "" when pid is gone.
func startTime(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	i := strings.LastIndexByte(string(b), ')')
	if err != nil || i < 0 {
		return ""
	}
	fs := strings.Fields(string(b[i+1:]))
	if len(fs) < 20 {
		return ""
	}
	return fs[19]
}

// Heavy makes t wait until no other heavy test of the suite runs (in this test binary, or in another package's
// that the same go test runs beside it), and keeps the slot until t and its subtests end. Call it at the start of every test that takes a
// large share of the machine: an embedded etcd, a world of many nodes or hundreds of connections, a flood, a
// memory figure. On two cores, two of them at once starve each other into timeouts that say nothing about the
// code. The time spent waiting is logged.
func Heavy(t testing.TB) {
	t.Helper()
	heavyMu.Lock()
	mine := heavyHolder == t
	heavyMu.Unlock()
	if mine {
		return
	}
	start := time.Now()
	heavySlot <- struct{}{}
	heavyMu.Lock()
	heavyHolder = t
	heavyMu.Unlock()
	f, err := os.OpenFile(heavyLock(), os.O_CREATE|os.O_RDWR, 0o666)
	release := func() {
		heavyMu.Lock()
		heavyHolder = nil
		heavyMu.Unlock()
		<-heavySlot
	}
	if err != nil {
		release()
		t.Fatalf("heavy-test lock: %v", err)
	}
	switch err = flock(f, unix.LOCK_EX|unix.LOCK_NB); {
	case err == unix.EWOULDBLOCK && heldByAncestor(f):
		// A test binary started by a heavy test (a test that runs go test, or .ci/run, as a user would): its
		// ancestor holds the slot for it, and waiting would wait forever.
		err = nil
	case err == unix.EWOULDBLOCK:
		err = flock(f, unix.LOCK_EX)
	}
	if err != nil {
		f.Close()
		release()
		t.Fatalf("heavy-test lock %s: flock: %v", f.Name(), err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Logf("waited %s for the heavy-test slot (%s)", d.Round(time.Millisecond), f.Name())
	}
	t.Cleanup(func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
		release()
	})
}

// flock is flock(2) on f, again when a signal interrupts it.
func flock(f *os.File, how int) error {
	for {
		if err := unix.Flock(int(f.Fd()), how); err != unix.EINTR {
			return err
		}
	}
}

// heldByAncestor reports whether a process that holds the flock on f (from /proc/locks) is this process's parent,
// or its parent's, and so on.
func heldByAncestor(f *os.File) bool {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return false
	}
	// "1: FLOCK  ADVISORY  WRITE 1047 fe:00:9977868 0 EOF"; waiters' lines have "->" after the number.
	ino := ":" + strconv.FormatUint(st.Ino, 10)
	holders := map[int]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		fs := strings.Fields(l)
		if len(fs) >= 6 && fs[1] == "FLOCK" && strings.HasSuffix(fs[5], ino) {
			if pid, err := strconv.Atoi(fs[4]); err == nil {
				holders[pid] = true
			}
		}
	}
	for pid := os.Getppid(); pid > 1; pid = parentOf(pid) {
		if holders[pid] {
			return true
		}
	}
	return false
}

// parentOf is the parent pid of pid (from /proc/<pid>/stat), 0 when unreadable.
func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	fs := strings.Fields(string(b[i+1:]))
	if len(fs) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fs[1])
	return ppid
}
