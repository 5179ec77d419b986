package main

import (
	"strconv"
	"strings"
	"testing"
)

// TestStartGrowsTheDescriptorTableOnce: in a start of 128 workers every worker, the first forked as the last, sees
// the launcher's descriptor table (FDSize in /proc/<launcher>/status) at one size, large enough for all of them: the
// table was grown once, before the first fork, and not doubled step by step during the burst (in a process of
// several threads each growth is an RCU grace period during which every descriptor the launcher opens waits: 30-40
// ms on a 16-core host; docs/BENCHMARKS.md, "The descriptor table").
func TestStartGrowsTheDescriptorTableOnce(t *testing.T) {
	t.Parallel()
	const n = 128
	r := runCLI(t, t.TempDir(), nil, "--nprocs", strconv.Itoa(n), "--", "/bin/sh", "-c",
		`while read -r k v; do if [ "$k" = FDSize: ]; then echo "fdsize $v"; fi; done < /proc/$PPID/status`)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	sizes := map[int][]string{} // size -> the ranks that saw it
	for line := range strings.Lines(r.stdout) {
		rank, rest, ok := strings.Cut(line, " fdsize ")
		if !ok {
			continue
		}
		size, err := strconv.Atoi(strings.TrimSpace(rest))
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		sizes[size] = append(sizes[size], rank)
	}
	seen := 0
	for _, ranks := range sizes {
		seen += len(ranks)
	}
	if seen != n || len(sizes) != 1 {
		t.Fatalf("%d of %d workers reported the launcher's table; the sizes they saw, with the ranks that saw them: %v\n%s",
			seen, n, sizes, r.stderr)
	}
	for size := range sizes {
		if size < 4*n {
			t.Fatalf("the launcher's table has %d entries, fewer than the %d descriptors %d workers keep open in it", size, 4*n, n)
		}
	}
}
