package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// Sweep sends sig to every process under procRoot (normally "/proc") whose environment holds key=value, except this
// process and those keep names (nil: none), and returns their pids. A process that cannot be read is skipped, and
// one that changed its environment with execve escapes it.
func Sweep(procRoot, key, value string, sig syscall.Signal, keep func(pid int) bool) ([]int, error) {
	pids, err := FindByEnv(procRoot, key, value)
	if err != nil {
		return nil, err
	}
	var hit []int
	var errs []error
	for _, pid := range pids {
		if keep != nil && keep(pid) {
			continue
		}
		if err := syscall.Kill(pid, sig); err != nil {
			if !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("sweep: signal %v to pid %d carrying %s=%s: %w", sig, pid, key, value, err))
			}
			continue
		}
		hit = append(hit, pid)
	}
	return hit, errors.Join(errs...)
}

// FindByEnv lists the pids under procRoot whose /proc/<pid>/environ holds exactly key=value, excluding this
// process.
func FindByEnv(procRoot, key, value string) ([]int, error) {
	if key == "" || value == "" {
		return nil, fmt.Errorf("find by env: empty key %q or value %q would match too much", key, value)
	}
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("find by env: read %s: %w", procRoot, err)
	}
	want := []byte(key + "=" + value)
	me := os.Getpid()
	buf := make([]byte, 64<<10)
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == me || pid <= 1 {
			continue
		}
		var b []byte
		b, buf, _ = readFile(filepath.Join(procRoot, e.Name(), "environ"), buf)
		if EnvironHas(b, want) {
			out = append(out, pid)
		}
	}
	return out, nil
}

// EnvironHas reports whether a NUL-separated environ block holds the exact entry kv ("KEY=value").
func EnvironHas(environ, kv []byte) bool {
	for len(environ) > 0 {
		var entry []byte
		entry, environ, _ = bytes.Cut(environ, []byte{0})
		if bytes.Equal(entry, kv) {
			return true
		}
	}
	return false
}

// ErrNoChildrenFile is returned by the Reaper's walks of this process's subtree when the kernel does not list
// children in /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN off): fall back to Sweep.
var ErrNoChildrenFile = errors.New("/proc/<pid>/task/<tid>/children not available")

// Sweep kills every descendant of this process, PID 1 or a child subreaper, found by walking
// /proc/<pid>/task/*/children under procRoot (no environment read), and lets the loop reap them. It kills every
// child of the process, so one process runs one launch at a time under a reaper. It returns the pids it killed but
// those started through the reaper. A process marked with Keep is left alive, not its descendants.
// ErrNoChildrenFile: fall back to Sweep.
func (r *Reaper) Sweep(procRoot string) ([]int, error) {
	return sweepTree(procRoot, os.Getpid(), func(pid int) (report, kill bool) {
		r.mu.Lock()
		defer r.mu.Unlock()
		o, ok := r.owned[pid]
		return !ok, !o.keep
	}, r.exited, 5*time.Second)
}

// sweepTree sends SIGKILL to every descendant of root and repeats until every descendant left is a zombie, within
// timeout. decide tells, for each descendant, whether to report it and whether to kill it (a descendant that is
// not killed is walked through: its own descendants are), and known which are zombies already (see descendants).
func sweepTree(procRoot string, root int, decide func(pid int) (report, kill bool), known func(pid int) bool,
	timeout time.Duration) ([]int, error) {
	if err := childrenListed(procRoot, root); err != nil {
		return nil, fmt.Errorf("sweep tree of pid %d: %w", root, err)
	}
	deadline := time.Now().Add(timeout)
	seen := map[int]bool{}
	var hit []int
	buf := make([]byte, 4096)
	backoff := 100 * time.Microsecond
	var last []int
	for {
		live := 0
		pids := descendants(procRoot, root, &buf, known)
		for _, pid := range pids {
			if zombie(procRoot, pid, &buf) {
				continue
			}
			// decide is asked before the kill: once killed, a worker may be reaped (and forgotten) at once.
			report, kill := decide(pid)
			if !kill {
				continue
			}
			live++
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				continue // ESRCH: gone since the walk
			}
			if !seen[pid] {
				seen[pid] = true
				if report {
					hit = append(hit, pid)
				}
			}
		}
		// Done when nothing is left to kill and the walk found the tree it found before: a process that exited
		// during the walk (a worker killed just before the sweep) may have handed its children to root after root's
		// list was read; the next walk finds them there.
		if live == 0 && slices.Equal(pids, last) {
			return hit, nil
		}
		last = pids
		if live == 0 {
			continue
		}
		if time.Now().After(deadline) {
			return hit, fmt.Errorf("sweep tree of pid %d: %d descendants still alive after SIGKILL and %v", root, live, timeout)
		}
		time.Sleep(backoff) // killed but not dead yet (exiting, or in D state): let them become zombies
		backoff = min(2*backoff, 20*time.Millisecond)
	}
}

// SignalTree sends sig once to every live descendant of this process (see Sweep) but those skip names, and returns
// their pids: the gentle first step of a sweep, without waiting. ErrNoChildrenFile as for Sweep.
func (r *Reaper) SignalTree(procRoot string, skip func(pid int) bool, sig syscall.Signal) ([]int, error) {
	if err := childrenListed(procRoot, os.Getpid()); err != nil {
		return nil, fmt.Errorf("signal tree of pid %d: %w", os.Getpid(), err)
	}
	var hit []int
	for _, pid := range r.live(procRoot, skip) {
		if syscall.Kill(pid, sig) == nil {
			hit = append(hit, pid)
		}
	}
	return hit, nil
}

// LiveDescendants counts the descendants of this process under procRoot that have not exited (zombies do not
// count), but those skip names (their descendants count).
func (r *Reaper) LiveDescendants(procRoot string, skip func(pid int) bool) int {
	return len(r.live(procRoot, skip))
}

// live lists the descendants of this process that have not exited but those skip names.
func (r *Reaper) live(procRoot string, skip func(pid int) bool) []int {
	buf := make([]byte, 4096)
	var out []int
	for _, pid := range descendants(procRoot, os.Getpid(), &buf, r.exited) {
		if !zombie(procRoot, pid, &buf) && (skip == nil || !skip(pid)) {
			out = append(out, pid)
		}
	}
	return out
}

// exited reports whether pid is a process started through the reaper whose exit was delivered and that is held
// unreaped: a zombie, which the walks of the subtree do not look at (they cost what the live subtree holds).
func (r *Reaper) exited(pid int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	o, ok := r.owned[pid]
	return ok && o.p.delivered.Load()
}

// childrenListed returns an error wrapping ErrNoChildrenFile when the kernel does not list root's children.
func childrenListed(procRoot string, root int) error {
	_, err := os.Stat(filepath.Join(procRoot, strconv.Itoa(root), "task", strconv.Itoa(root), "children"))
	if err != nil {
		return fmt.Errorf("%w (%w)", ErrNoChildrenFile, err)
	}
	return nil
}

// descendants lists every descendant of root, breadth first, but those known (when not nil) says are zombies:
// neither listed nor looked into (their children were re-parented when they exited).
func descendants(procRoot string, root int, buf *[]byte, known func(pid int) bool) []int {
	var out []int
	queue := []int{root}
	visited := map[int]bool{root: true} // a pid reused mid-walk must not loop
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		kids, _ := children(procRoot, pid, buf)
		for _, c := range kids {
			if c > 1 && !visited[c] && (known == nil || !known(c)) {
				visited[c] = true
				out = append(out, c)
				queue = append(queue, c)
			}
		}
	}
	return out
}

// children lists the children of pid from the children files of all of its threads (a child belongs to the thread
// that forked it). ok is false when pid is gone or the kernel does not list children.
func children(procRoot string, pid int, buf *[]byte) (kids []int, ok bool) {
	taskDir := filepath.Join(procRoot, strconv.Itoa(pid), "task")
	tids, err := os.ReadDir(taskDir)
	if err != nil {
		return nil, false
	}
	for _, t := range tids {
		var b []byte
		var found bool
		b, *buf, found = readFile(filepath.Join(taskDir, t.Name(), "children"), *buf)
		ok = ok || found
		kids = append(kids, pids(b)...)
	}
	return kids, ok
}
