package proc

import (
	"bytes"
	"strconv"

	"golang.org/x/sys/unix"
)

// The kernel keeps a process's descriptors in a table it grows by doubling (64, 128, 256 ... entries). In a process
// whose threads share the table (every Go program) each growth waits for an RCU grace period, and meanwhile every
// thread that opens, pipes or duplicates a descriptor past the old end waits with it: 7-16 ms on a 2-core VM, 8-31
// ms on a 16-core one (docs/BENCHMARKS.md, "The descriptor table"). A start of 64 workers has some 450 descriptors
// open at its peak and paid three growths, one after the other, in the middle of the burst.

// ReserveFDsAhead readies this process's descriptor table for a burst that will have from least to most more
// descriptors open at once. When even least cannot fit in the table as it is, the table is grown in one step to hold
// most: one grace period instead of one per doubling. When least may fit it is left alone: the burst may then need
// no growth at all, where a reservation would always cost one (a start of 8 workers fits in the first 64 entries),
// or it grows the table once, rarely twice. Best effort: RLIMIT_NOFILE caps it; an error leaves the table as it was.
//
// The growth is made by another thread and ReserveFDsAhead returns at once, with a channel closed once that thread
// is about to ask the kernel for it (nil when no growth is needed). Its grace period passes while the caller goes
// on: a descriptor numbered within the table as it was opens at once meanwhile; one past its end (or another
// reservation) waits for the growth under way, the kernel making one at a time, and finds the room made. A caller
// about to go past the end waits for the channel first: had it got there before the growth began, it would have
// doubled the table itself. room is how many descriptors the table holds beyond the lowest free number (at most
// that many open meanwhile without waiting for the growth; fewer when some above it are open).
func ReserveFDsAhead(least, most int) (begun <-chan struct{}, room int) {
	top, room := reservation(least, most)
	if top == 0 {
		return nil, room
	}
	c := make(chan struct{})
	go growTo(top, c)
	return c, room
}

// reservation is the number the table must hold for ReserveFDsAhead(least, most), or 0 when it is to be left alone,
// and the room left in it as it is (0 when unknown).
func reservation(least, most int) (top, room int) {
	fd, err := unix.Open("/proc/self/status", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0
	}
	defer unix.Close(fd)
	size := fdTableSize(fd)
	if size <= 0 {
		return 0, 0
	}
	free, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0) // every number below it is taken
	if err != nil {
		return 0, 0
	}
	_ = unix.Close(free)
	room = max(size-free, 0)
	if free+least <= size {
		return 0, room
	}
	top = size + most // every open descriptor is numbered below size
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil && uint64(top) > lim.Cur {
		top = int(lim.Cur)
	}
	if top <= size {
		return 0, room
	}
	return top, room
}

// growTo grows the table to hold top descriptors, and closes begun just before it asks the kernel.
// The lowest free number at or above top-1 is top-1 itself (it is past the table's end, or the table was grown
// meanwhile): the kernel grows the table to hold it, and the copy is closed at once. Nothing else is touched: F_DUPFD
// never replaces a descriptor. While that copy is open (from the growth's end until this goroutine runs again), a
// process forked from the shared table gets a table of top entries (fork sizes a child's table for its parent's
// highest open descriptor): the forking threads' own tables never hold it (ownTable copies only what they keep).
func growTo(top int, begun chan struct{}) {
	fd, err := unix.Open("/proc/self/status", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	close(begun)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if hi, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, top-1); err == nil {
		_ = unix.Close(hi)
	}
}

// fdTableSize reads FDSize from fd, an open /proc/<pid>/status.
func fdTableSize(fd int) int {
	var buf [4096]byte
	n := 0
	for n < len(buf) {
		k, err := unix.Pread(fd, buf[n:], int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil || k <= 0 {
			break
		}
		n += k
	}
	_, rest, ok := bytes.Cut(buf[:n], []byte("\nFDSize:"))
	if !ok {
		return 0
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	size, err := strconv.Atoi(string(bytes.TrimSpace(line)))
	if err != nil {
		return 0
	}
	return size
}
