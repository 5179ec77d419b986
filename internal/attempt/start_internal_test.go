package attempt

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"

	"tpurun/internal/failure"
	"tpurun/internal/testutil"
	"tpurun/internal/topology"
)

// TestQuietGCNests: the collector is off while any start burst runs, and back to its setting after the last.
func TestQuietGCNests(t *testing.T) {
	prev := debug.SetGCPercent(77)
	defer debug.SetGCPercent(prev)
	a := quietGC()
	b := quietGC()
	if p := debug.SetGCPercent(-1); p != -1 {
		t.Fatalf("GC percent %d during two bursts, want -1 (off)", p)
	}
	a()
	if p := debug.SetGCPercent(-1); p != -1 {
		t.Fatalf("GC percent %d after the first of two bursts ended, want -1 (off)", p)
	}
	b()
	if p := debug.SetGCPercent(77); p != 77 {
		t.Fatalf("GC percent %d after both bursts, want 77", p)
	}
}

// TestQuietGCBoundsTheHeap: the collector stays off through a start burst only while the process's memory stays
// within a bound. A start can be long (a slow preloaded interpreter, a loaded host), and the output the workers
// already started forward meanwhile is garbage: 512 workers each writing 2 MB as they start took tpurun to 735 MB
// peak RSS (155 MB with the collector on).
func TestQuietGCBoundsTheHeap(t *testing.T) {
	testutil.Heavy(t)
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	runtime.GC()
	before := heap()
	restore := quietGC()
	defer restore()
	const garbage = 256 << 20
	var sink []byte
	for range garbage / (64 << 10) {
		sink = make([]byte, 64<<10)
		sink[0] = 1
	}
	_ = sink
	if grown := heap() - before; grown > garbage/2 {
		t.Fatalf("the heap grew by %d MiB for %d MiB of garbage made during a start burst: the collector never ran",
			grown>>20, garbage>>20)
	}
}

// TestMemoryInUseIsWhatTheLimitCounts: quietGC's bound is taken from runtime/metrics (no stop of the world): the
// memory the runtime has mapped less what it released, what its memory limit counts. Both metrics exist (a wrong
// name panics), and the figure lies between the heap in use and all the runtime ever mapped (MemStats' Sys, read
// after it: it never shrinks). Not compared for equality: the scavenger releases memory between two reads.
func TestMemoryInUseIsWhatTheLimitCounts(t *testing.T) {
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	got := memoryInUse()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if got <= 0 || uint64(got) > after.Sys || uint64(got) < min(before.HeapInuse, after.HeapInuse) {
		t.Fatalf("memoryInUse() = %d, want within [HeapInuse %d, Sys %d]", got, min(before.HeapInuse, after.HeapInuse), after.Sys)
	}
}

// TestStartErrorNamesTheLimit: a worker that cannot be forked for want of processes (EAGAIN) or descriptors is an
// internal error (70) that says which limit to raise; the fork failed with a bare "resource temporarily
// unavailable" before.
func TestStartErrorNamesTheLimit(t *testing.T) {
	j := &Runner{Program: []string{"/bin/true"}}
	cmd := exec.Command("/bin/true")
	for _, tc := range []struct {
		errno syscall.Errno
		want  string
	}{{syscall.EAGAIN, "raise ulimit -u"}, {syscall.EMFILE, "raise ulimit -n"}} {
		err := j.startError(topology.Worker{Rank: 3}, &os.PathError{Op: "fork/exec", Path: "/bin/true", Err: tc.errno}, cmd)
		if !errors.Is(err, failure.ErrInternal) || !errors.Is(err, tc.errno) || !strings.Contains(err.Error(), tc.want) ||
			!strings.Contains(err.Error(), "rank 3") {
			t.Errorf("fork failing with %v: %v, want an internal error of rank 3 that says %q", tc.errno, err, tc.want)
		}
	}
	if err := j.startError(topology.Worker{}, &os.PathError{Op: "fork/exec", Path: "/bin/true", Err: syscall.EIO}, cmd); strings.Contains(err.Error(), "ulimit") {
		t.Errorf("EIO: %v names a limit", err)
	}
}

// TestSamplerHoldsNoDescriptors: sampling a live worker opens nothing that outlives the sample. (gopsutil's
// NewProcess calls os.FindProcess, which holds a pidfd until the garbage collector finalizes it: one descriptor
// per worker per interval, thousands within an hour on a host of many workers.) The collector is off during the
// samples, so a descriptor left to a finalizer stays counted.
func TestSamplerHoldsNoDescriptors(t *testing.T) {
	cmd := exec.Command("sleep", "3600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	fds := func() int {
		es, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	s := NewSampler(1, nil)
	s.add(cmd.Process.Pid, 0)
	before := fds()
	const samples = 200
	for range samples {
		s.once(context.Background())
	}
	if n := fds() - before; n > 0 {
		t.Errorf("%d samples left %d more open descriptors, want none", samples, n)
	}
	smp := s.remove(cmd.Process.Pid)
	if smp.RSS == 0 || smp.PeakRSS < smp.RSS || smp.At.IsZero() {
		t.Errorf("the sample of a live process is %+v, want its RSS", smp)
	}
}
