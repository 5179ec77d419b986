package results

import (
	"bytes"
	"errors"
	"sync/atomic"
	"testing"

	"tpurun/worker"
)

// TestOnResultCountsEveryReportedOutcome: the hook behind the status endpoint's results counter sees each result
// and each error a worker reports, duplicates included, and nothing for a frame it could not decode.
func TestOnResultCountsEveryReportedOutcome(t *testing.T) {
	var n atomic.Int64
	c := NewCollector(Options{OnResult: func() { n.Add(1) }})
	var b bytes.Buffer
	cl := worker.NewClient(&b, []int{0, 1})
	if err := cl.Report(0, 1); err != nil {
		t.Fatal(err)
	}
	if err := cl.Fail(1, errors.New("diverged")); err != nil {
		t.Fatal(err)
	}
	if err := cl.Report(0, 2); err != nil { // a duplicate is still a reported outcome
		t.Fatal(err)
	}
	b.WriteString("garbage that is no frame")
	_ = c.Consume(0, 100, []int{0, 1}, &b)
	if got := n.Load(); got != 3 {
		t.Fatalf("OnResult called %d times, want 3 (2 results and 1 error)", got)
	}
}
