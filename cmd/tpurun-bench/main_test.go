package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
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

// TestEvictDropsThePages: a file just written has its pages in the page cache; after evict none is (mincore).
func TestEvictDropsThePages(t *testing.T) {
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && (st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC) {
		// a file in memory has no page to drop: use the package's directory, on the checkout's disk
		d, err := os.MkdirTemp(".", ".evict-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(d) })
		dir = d
	}
	p := filepath.Join(dir, "bin")
	if err := os.WriteFile(p, make([]byte, 1<<20), 0o755); err != nil {
		t.Fatal(err)
	}
	if n := resident(t, p); n == 0 {
		t.Fatal("a file just written has no page in the page cache: this check cannot tell")
	}
	if err := evict(p); err != nil {
		t.Fatal(err)
	}
	if n := resident(t, p); n != 0 {
		t.Fatalf("%d pages of the file still in the page cache after evict", n)
	}
}

// resident counts the pages of the file at p in the page cache.
func resident(t *testing.T, p string) int {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// TestBenchLine: a go test -bench result line gives the benchmark's name (without the GOMAXPROCS suffix), its
// ns/op and the metrics it reported, a held world's failures among them.
func TestBenchLine(t *testing.T) {
	m := benchLine.FindStringSubmatch("BenchmarkRendezvousHeld1024Etcd-2   \t       1\t7233639919 ns/op\t         0 failures/op")
	if m == nil || m[1] != "BenchmarkRendezvousHeld1024Etcd" || m[2] != "7233639919" || strings.TrimSpace(m[3]) != "0 failures/op" {
		t.Fatalf("parsed %q", m)
	}
	if m := benchLine.FindStringSubmatch("BenchmarkRendezvous1024Etcd-2  1  5295993672 ns/op"); m == nil || m[1] != "BenchmarkRendezvous1024Etcd" || m[3] != "" {
		t.Fatalf("parsed %q", m)
	}
	for metrics, held := range map[string]bool{"0 failures/op": true, "4096 refused/op 0 failures/op": true, "10 failures/op": false, "": false} {
		if noFailures.MatchString(metrics) != held {
			t.Errorf("%q: held %v, want %v", metrics, !held, held)
		}
	}
}
