package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Self is this process's pid; Sweep never signals it.
func self() int { return os.Getpid() }

// Sweep finds every process under procRoot (normally "/proc") whose environment holds key=value, except this
// process and those keep names (nil: none), and sends it sig. It returns the pids it signalled. Processes that
// vanish or cannot be read while scanning are skipped: a process that changed its environment with execve escapes
// the sweep.
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
	me := self()
	buf := make([]byte, 64<<10)
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == me || pid <= 1 {
			continue
		}
		var b []byte
		b, buf = readSmall(filepath.Join(procRoot, e.Name(), "environ"), buf)
		if EnvironHas(b, want) {
			out = append(out, pid)
		}
	}
	return out, nil
}

// readSmall reads a whole /proc file into buf (grown as needed) with plain open/read/close: os.ReadFile's
// stat and poller registration would triple the syscalls of a sweep over every process of the host. A file
// that cannot be read (gone, not ours) reads as empty.
func readSmall(path string, buf []byte) ([]byte, []byte) {
	b, buf, _ := readFile(path, buf)
	return b, buf
}

// readFile is readSmall that reports whether the file could be opened.
func readFile(path string, buf []byte) ([]byte, []byte, bool) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, buf, false
	}
	defer syscall.Close(fd)
	if len(buf) == 0 {
		buf = make([]byte, 512) // an empty buffer would read as an empty file
	}
	n := 0
	for {
		if n == len(buf) {
			buf = append(buf, make([]byte, len(buf))...)
		}
		k, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil || k <= 0 {
			return buf[:n], buf, true
		}
		n += k
	}
}

// EnvironHas reports whether a NUL-separated environ block holds the exact entry kv ("KEY=value").
func EnvironHas(environ, kv []byte) bool {
	for len(environ) > 0 {
		i := bytes.IndexByte(environ, 0)
		var entry []byte
		if i < 0 {
			entry, environ = environ, nil
		} else {
			entry, environ = environ[:i], environ[i+1:]
		}
		if bytes.Equal(entry, kv) {
			return true
		}
	}
	return false
}

// ErrNoChildrenFile is returned by SweepTree when the kernel does not list children in
// /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN off): fall back to Sweep.
var ErrNoChildrenFile = errors.New("/proc/<pid>/task/<tid>/children not available")

// SweepTree sends SIGKILL to every descendant of root (normally this process, a child subreaper or PID 1, so that
// every orphan below it is re-parented to it) found by walking /proc/<pid>/task/*/children under procRoot, and
// repeats until every descendant left is a zombie, within timeout. No environment is read and no other process of
// the host is looked at: a descendant that left its group and session and dropped every TPURUN_* variable is still
// found. skip tells which pids not to report (they are still killed), e.g. the workers already killed by group.
// It returns the reported pids it signalled, and ErrNoChildrenFile when the kernel cannot list children.
func SweepTree(procRoot string, root int, skip func(pid int) bool, timeout time.Duration) ([]int, error) {
	return sweepTree(procRoot, root, func(pid int) (bool, bool) { return skip == nil || !skip(pid), true }, nil, timeout)
}

// sweepTree is SweepTree where decide tells, for each descendant, whether to report it and whether to kill it (a
// descendant that is not killed is walked through: its own descendants are), and known which are zombies already
// (see descendants).
func sweepTree(procRoot string, root int, decide func(pid int) (report, kill bool), known func(pid int) bool,
	timeout time.Duration) ([]int, error) {
	if _, err := os.Stat(filepath.Join(procRoot, strconv.Itoa(root), "task", strconv.Itoa(root), "children")); err != nil {
		return nil, fmt.Errorf("sweep tree of pid %d: %w (%w)", root, ErrNoChildrenFile, err)
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

// SignalTree sends sig once to every live (not zombie) descendant of root found under procRoot (see SweepTree),
// except those skip names, and returns the pids it signalled: the first, gentle step of a sweep (SIGTERM to the
// helpers a finished worker left, so that they can flush), without waiting for them. ErrNoChildrenFile when the
// kernel does not list children.
func SignalTree(procRoot string, root int, skip func(pid int) bool, sig syscall.Signal) ([]int, error) {
	return signalTree(procRoot, root, skip, nil, sig)
}

func signalTree(procRoot string, root int, skip, known func(pid int) bool, sig syscall.Signal) ([]int, error) {
	if _, err := os.Stat(filepath.Join(procRoot, strconv.Itoa(root), "task", strconv.Itoa(root), "children")); err != nil {
		return nil, fmt.Errorf("signal tree of pid %d: %w (%w)", root, ErrNoChildrenFile, err)
	}
	buf := make([]byte, 4096)
	var hit []int
	for _, pid := range descendants(procRoot, root, &buf, known) {
		if zombie(procRoot, pid, &buf) || (skip != nil && skip(pid)) {
			continue
		}
		if syscall.Kill(pid, sig) == nil {
			hit = append(hit, pid)
		}
	}
	return hit, nil
}

// LiveDescendants counts the descendants of root under procRoot that have not exited (zombies do not count).
func LiveDescendants(procRoot string, root int) int {
	return LiveDescendantsExcept(procRoot, root, nil)
}

// LiveDescendantsExcept is LiveDescendants that does not count the pids skip names (their descendants count).
func LiveDescendantsExcept(procRoot string, root int, skip func(pid int) bool) int {
	return liveDescendants(procRoot, root, skip, nil)
}

func liveDescendants(procRoot string, root int, skip, known func(pid int) bool) int {
	buf := make([]byte, 4096)
	n := 0
	for _, pid := range descendants(procRoot, root, &buf, known) {
		if !zombie(procRoot, pid, &buf) && (skip == nil || !skip(pid)) {
			n++
		}
	}
	return n
}

// descendants lists every descendant of root, breadth first (see children), but those known (when not nil) says
// are zombies: they are neither listed nor looked into (an exited process has no children: they were re-parented
// when it exited).
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

// children lists the children of pid from the children files of all of its threads (a child belongs to the
// thread that forked it, or that it was re-parented to). ok is false when pid is gone or the kernel does not
// list children.
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
		for f := range strings.FieldsSeq(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				kids = append(kids, c)
			}
		}
	}
	return kids, ok
}

// zombie reports whether pid has exited but is not reaped yet (state Z or X in /proc/<pid>/stat); a pid that is
// gone counts as a zombie too: nothing left to kill.
func zombie(procRoot string, pid int, buf *[]byte) bool {
	var b []byte
	b, *buf = readSmall(filepath.Join(procRoot, strconv.Itoa(pid), "stat"), *buf)
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return true
	}
	return b[i+2] == 'Z' || b[i+2] == 'X'
}
