package console

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"

	"tpurun/internal/testutil"
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
	var d Drain
	var wg sync.WaitGroup
	var writers []*os.File
	outs := make([]*bytes.Buffer, n)
	for i := range n {
		r, w, err := Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		writers = append(writers, w)
		outs[i] = &bytes.Buffer{}
		f := &Forwarder{Prefix: []byte(fmt.Sprintf("[%d] ", i)), Console: outs[i]}
		wg.Go(func() { _ = f.Run(d.Reader(r)) })
	}
	testutil.Eventually(t, fmt.Sprintf("%d forwarders waiting in the poller", n), func() bool { return parked("(*Forwarder).Run") == n })
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
