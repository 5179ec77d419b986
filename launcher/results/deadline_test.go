package results

import (
	"errors"
	"os"
	"testing"
	"time"

	"tpurun/worker"
)

// TestConsumeReturnsOnDeadline: when the launcher stops draining (a read deadline on the pipe, e.g. a grandchild
// keeps the write end open), Consume returns at once, keeps what arrived and says why.
func TestConsumeReturnsOnDeadline(t *testing.T) {
	for _, midFrame := range []bool{false, true} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		c := NewCollector(Options{})
		if err := worker.NewClient(w, []int{0}).Report(0, "kept"); err != nil {
			t.Fatal(err)
		}
		if midFrame {
			w.Write(worker.AppendHeader(nil, worker.KindResult, worker.EncodingJSON, 0, 10))
		}
		r.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		err = c.Consume(0, 1, []int{0}, r)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("midFrame=%v: %v, want it to wrap os.ErrDeadlineExceeded", midFrame, err)
		}
		if got := errors.Is(err, ErrTruncatedFrame); got != midFrame {
			t.Fatalf("midFrame=%v: truncated_frame=%v: %v", midFrame, got, err)
		}
		if e := c.Share().Results; len(e) != 1 || string(e[0].Value) != `"kept"` {
			t.Fatalf("entries %+v", e)
		}
		w.Close()
		r.Close()
	}
}
