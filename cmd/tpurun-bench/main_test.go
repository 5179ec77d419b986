package main

import (
	"strings"
	"testing"
)

// TestKeepByHand: a new report keeps the old one's part measured by hand (from the byHand line on) and drops the
// old generated part; an old report without the line leaves the new one as it is.
func TestKeepByHand(t *testing.T) {
	old := "# tpurun benchmarks\n| old row |\n\n" + byHand + "\n\n## 16 cores\n| N | tpurun |\n"
	got := keepByHand("# tpurun benchmarks\n| new row |\n", old)
	if !strings.Contains(got, "| new row |") || strings.Contains(got, "| old row |") ||
		!strings.HasSuffix(got, byHand+"\n\n## 16 cores\n| N | tpurun |\n") {
		t.Fatalf("keepByHand kept the wrong parts:\n%s", got)
	}
	if got := keepByHand("new\n", "old, generated only\n"); got != "new\n" {
		t.Fatalf("without the byHand line: %q, want the new report alone", got)
	}
}
