package tcp

import (
	"fmt"
	"strings"
	"testing"

	"tpurun/rendezvous"
)

// TestFormingProgressMadeOnce: the progress line answering the waiting nodes is made once per progressFresh, not
// once per request: every node of a world asks, and a line is made from every node arrived (16,384 nodes made
// that the square of the world). A node arriving meanwhile shows in the next line, not in the one served.
func TestFormingProgressMadeOnce(t *testing.T) {
	s := &Server{}
	w := newWorld(0, &joinReq{nnodes: 4, min: 4}, nil, "")
	arrive := func(i int) {
		w.entries = append(w.entries, &entry{m: rendezvous.Member{Host: fmt.Sprintf("node-%d", i), Instance: fmt.Sprint(i), Rank: -1}, rank: -1})
	}
	arrive(0)
	arrive(1)
	first := s.formingProgress(w).Extra[progressKey]
	if !strings.Contains(first, "2 of 4 arrived") {
		t.Fatalf("progress line %q, want 2 of 4 arrived", first)
	}
	arrive(2)
	if again := s.formingProgress(w).Extra[progressKey]; again != first {
		t.Fatalf("progress line made again within %s: %q, want the one made: %q", progressFresh, again, first)
	}
	w.progressAt = w.progressAt.Add(-progressFresh) // as if progressFresh had passed
	if next := s.formingProgress(w).Extra[progressKey]; !strings.Contains(next, "3 of 4 arrived") {
		t.Fatalf("progress line after %s: %q, want 3 of 4 arrived", progressFresh, next)
	}
}
