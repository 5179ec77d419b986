package launcher

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"

	"tpurun/launcher/launchertest"
)

// parked counts the goroutines parked in the poller in fn.
func parked(fn string) int {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte(" [IO wait")) && bytes.Contains(g, []byte(fn)) {
			n++
		}
	}
	return n
}

// TestIdleForwardersHoldNoBuffer: the forwarders of workers whose pipes have nothing to say yet wait in the
// poller without a read buffer (each held 64 KiB from its start, hundreds of MiB for a thousand workers); once
// output comes they forward it, whole.
func TestIdleForwardersHoldNoBuffer(t *testing.T) {
	live := func() uint64 { // the heap in use, the pool's buffers (and their victim cache) dropped
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	const n = 64
	before := live()
	wk := &child{}
	var wg sync.WaitGroup
	var writers []*os.File
	outs := make([]*bytes.Buffer, n)
	for i := range n {
		r, w, err := pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		writers = append(writers, w)
		outs[i] = &bytes.Buffer{}
		f := &forwarder{prefix: []byte(fmt.Sprintf("[%d] ", i)), console: outs[i]}
		wg.Go(func() { _ = f.run(drainReader{r, wk}) })
	}
	launchertest.Eventually(t, fmt.Sprintf("%d forwarders waiting in the poller", n), func() bool { return parked("(*forwarder).run") == n })
	if held := int64(live()) - int64(before); held >= n*readSize/4 {
		t.Fatalf("%d idle forwarders hold %d bytes of heap, want no %d-byte read buffer each", n, held, readSize)
	}
	for i, w := range writers {
		fmt.Fprintf(w, "line %d\npartial", i)
		w.Close()
	}
	wg.Wait()
	for i, out := range outs {
		if want := fmt.Sprintf("[%d] line %d\n[%d] partial\n", i, i, i); out.String() != want {
			t.Errorf("forwarder %d wrote %q, want %q", i, out.String(), want)
		}
	}
}

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
	launchertest.Heavy(t)
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
