package proc

import (
	"errors"
	"fmt"
	"time"
)

// ErrNotChild is returned by AdoptHeld for a pid that is not a child of this process leading its own process
// group: a process forked elsewhere that was not re-parented here (this process is not its child subreaper).
var ErrNotChild = errors.New("not a child of this process that leads its own process group")

// AdoptHeld supervises, as a held process (see StartHeld), a child that this process did not fork itself: a worker
// forked by a preloaded interpreter (a zygote) and re-parented to this process, its child subreaper, once the
// intermediate process that forked it exited. fork makes that child and returns its pid; no orphan is reaped while
// it runs (forkMu, as for a fork of Start), so that the child's exit, however early, is never reaped as an orphan's
// before it is registered. The reaper's lock is not held meanwhile: a fork may wait long for a slow interpreter, and
// the processes already started are signalled and their exits delivered all the while.
// fork must return only once the child is this process's own and leads its own process group; otherwise the
// pid is refused with ErrNotChild (and left alone: it is not this process's to signal). The adopted process is
// signalled, held, released and swept exactly like one started through StartHeld; its start time is the call's.
func (r *Reaper) AdoptHeld(fork func() (int, error), onExit func(*Process)) (*Process, error) {
	r.forkMu.RLock()
	defer r.forkMu.RUnlock()
	start := time.Now()
	pid, err := fork()
	if err != nil {
		return nil, err
	}
	var buf []byte // not r.buf: the loop reads children files with it
	if err := checkChild("/proc", pid, self(), &buf); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p := newProcess(nil, pid, start, true, onExit)
	p.rp = r
	o := owned{p: p, watch: watchListed}
	if fd, err := pidfdOpen(pid, 0); err == nil { // old kernels: no pidfd, the group is signalled by pid
		p.pidfd = fd
		if r.exits != nil && r.exits.add(fd, pid) == nil { // its event waits for the lock held here
			o.watch = watchPolled
		}
	}
	if o.watch == watchListed {
		r.listing++
	}
	r.owned[pid] = o
	return p, nil
}

// checkChild returns nil when pid is a child of parent (a zombie one too) that leads its own process group, from
// /proc/<pid>/stat (fields 4 and 5), and an error wrapping ErrNotChild otherwise.
func checkChild(procRoot string, pid, parent int, buf *[]byte) error {
	st, ok := readStat(procRoot, pid, buf)
	if !ok {
		return fmt.Errorf("pid %d: %w: it does not exist", pid, ErrNotChild)
	}
	if st.ppid != parent || st.pgid != pid {
		return fmt.Errorf("pid %d: %w (its parent is %d, its process group %d; want parent %d and group %d)",
			pid, ErrNotChild, st.ppid, st.pgid, parent, pid)
	}
	return nil
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
