package launcher

import (
	"runtime/debug"
	"testing"
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
