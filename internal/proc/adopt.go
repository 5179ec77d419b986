package proc

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// ErrNotChild is returned by AdoptHeld for a pid that is not a child of this process leading its own process
// group: a process forked elsewhere that was not re-parented here (this process is not its child subreaper).
var ErrNotChild = errors.New("not a child of this process that leads its own process group")

// AdoptHeld supervises, as a held process (see StartHeld), a child this process did not fork: a worker forked by
// a preloaded interpreter and re-parented to this process, its child subreaper. fork makes that child and returns
// its pid once the child is this process's own and leads its own process group (else ErrNotChild, and the pid is
// left alone). No orphan is reaped while fork runs (forkMu), so the child's exit is never reaped as an orphan's;
// the reaper's lock is not held, so a slow fork delays no signal or exit. Its start time is the call's.
func (r *Reaper) AdoptHeld(fork func() (int, error), onExit func(*Process)) (*Process, error) {
	r.forkMu.RLock()
	defer r.forkMu.RUnlock()
	start := time.Now()
	pid, err := fork()
	if err != nil {
		return nil, err
	}
	var buf []byte // not r.buf: the loop reads children files with it
	st, ok := readStat("/proc", pid, &buf)
	if !ok {
		return nil, fmt.Errorf("pid %d: %w: it does not exist", pid, ErrNotChild)
	}
	if st.ppid != os.Getpid() || st.pgid != pid {
		return nil, fmt.Errorf("pid %d: %w (its parent is %d, its process group %d; want parent %d and group %d)",
			pid, ErrNotChild, st.ppid, st.pgid, os.Getpid(), pid)
	}
	p := r.own(nil, pid, start, true, onExit)
	r.watch(p)
	return p, nil
}

// Kept reports whether pid is a process marked with Keep (and not reaped yet): the launcher leaves it out of the
// processes the workers left behind.
func (r *Reaper) Kept(pid int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.owned[pid].keep
}

// Keep makes Sweep leave p (a process started through this reaper, such as a preloaded interpreter that outlives
// the attempts it forks workers for) alive; its descendants are still killed. It lasts until p is reaped.
func (r *Reaper) Keep(p *Process) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if o, ok := r.owned[p.pid]; ok {
		o.keep = true
		r.owned[p.pid] = o
	}
}
