package proc

import (
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// What the tests of the reaper see of its insides. Each hook is set by a re-executed test binary before it makes
// its reaper, and never reset: nothing else runs in that process.

// CountWaits makes the reaper count its waitid calls; the returned function reads the counts: those that wait for
// one pid (P_PID: a look at one child) and those that wait for any child (P_ALL).
func CountWaits() (counts func() (onePID, anyChild int)) {
	var one, anyChild atomic.Int64
	inner := waitid
	waitid = func(idType, id int, info *unix.Siginfo, options int) error {
		switch idType {
		case unix.P_PID:
			one.Add(1)
		case unix.P_ALL:
			anyChild.Add(1)
		}
		return inner(idType, id, info, options)
	}
	return func() (int, int) { return int(one.Load()), int(anyChild.Load()) }
}

// WithoutPidfd makes the reaper run as on a kernel without pidfds (before Linux 5.3).
func WithoutPidfd() {
	pidfdOpen = func(int, int) (int, error) { return -1, syscall.ENOSYS }
}

// WithSharedTable makes the forking thread fork from the process's descriptor table, as where close_range cannot
// unshare it (before Linux 5.9, or refused by a seccomp filter).
func WithSharedTable() {
	closeRange = func(uint, uint, uint) error { return syscall.ENOSYS }
}

// WithoutForkingThread makes the reaper run without a forking thread: every child is forked from its starter's.
func WithoutForkingThread() {
	startSpawner = func([2]int, []int) (*spawner, error) { return nil, syscall.EAGAIN }
}

// ForkingThreads is how many forking threads r has started.
func ForkingThreads(r *Reaper) int {
	r.spawnMu.Lock()
	defer r.spawnMu.Unlock()
	return len(r.spawn)
}

// ForkingTids are the thread ids of r's forking threads, once each is set up.
func ForkingTids(r *Reaper) []int {
	r.spawnMu.Lock()
	defer r.spawnMu.Unlock()
	var tids []int
	for _, sp := range r.spawn {
		<-sp.ready
		tids = append(tids, sp.tid)
	}
	return tids
}

// ForkingTable is the forking thread's id and whether its descriptor table is its own (0, false without one).
func ForkingTable(r *Reaper) (tid int, private bool) {
	spawn, _ := r.spawners(1)
	if len(spawn) == 0 {
		return 0, false
	}
	<-spawn[0].ready
	return spawn[0].tid, spawn[0].private
}
