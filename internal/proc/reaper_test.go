package proc_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"tpurun/internal/proc"
	"tpurun/internal/testutil"
)

// These verbs run in re-executed test binaries, so that the subreaper bit and the wait4(-1) loop never touch the
// children of the other tests.
func init() {
	testutil.Define(testutil.Verb{Name: "orphaner", Spawns: []string{"linger"}, Run: func(w *testutil.Worker) int {
		// start a grandchild that outlives us, print its pid, exit 7 without waiting for it
		gc := w.Child("linger:" + strconv.Itoa(os.Getpid()))
		if err := gc.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		fmt.Println(gc.Process.Pid)
		return 7
	}})
	// linger:PID exits 0 once its parent, PID, has exited: an orphan by then.
	testutil.Define(testutil.Verb{Name: "linger", Run: func(w *testutil.Worker) int {
		_ = testutil.Poll("the parent to exit", func() error {
			if os.Getppid() == w.N {
				return errors.New("still there")
			}
			return nil
		})
		return 0
	}})
	testutil.Define(testutil.Verb{Name: "held-reaper-main", Run: func(*testutil.Worker) int { return okOr(heldReaperMain()) },
		Spawns: []string{"orphaner"}})
	testutil.Define(testutil.Verb{Name: "reaper-main", Run: func(*testutil.Worker) int { return okOr(reaperMain()) },
		Spawns: []string{"orphaner"}})
	testutil.Define(testutil.Verb{Name: "concurrent-starts-main", Run: func(*testutil.Worker) int { return okOr(concurrentStartsMain()) }})
	testutil.Define(testutil.Verb{Name: "null-emfile-main", Run: func(*testutil.Worker) int { return okOr(nullEMFILEMain()) },
		Spawns: []string{"crash"}})
	testutil.Define(testutil.Verb{Name: "forking-threads-main", Run: func(*testutil.Worker) int { return okOr(forkingThreadsMain()) }})
	testutil.Define(testutil.Verb{Name: "late-thread-table-main", Run: func(*testutil.Worker) int { return okOr(lateThreadTableMain()) }})
	testutil.Define(testutil.Verb{Name: "late-thread-children-main", Run: func(*testutil.Worker) int { return okOr(lateThreadChildrenMain()) }})
	testutil.Define(testutil.Verb{Name: "subreaper-get", Run: func(*testutil.Worker) int { return subreaperGet() }})
}

// runMain runs verb, one of the mains below, in a re-executed test binary (its reaper and subreaper bit touch no
// other test's children) and fails t unless it printed OK (see okOr).
func runMain(t *testing.T, verb string) {
	t.Helper()
	out, err := testutil.Command(verb).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK") {
		t.Fatalf("%s: %v\n%s", verb, err, out)
	}
}

// okOr prints OK and returns 0 for a nil err, else prints err and returns 1.
func okOr(err error) int {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("OK")
	return 0
}

func reaperMain() error {
	if err := proc.SetSubreaper(); err != nil {
		return err
	}
	rp := proc.NewReaper(nil)
	defer rp.Close()
	got := make(chan proc.Exit, 1)
	p, gpid, err := startOrphaner(func(cmd *exec.Cmd) (*proc.Process, error) {
		return rp.Start(cmd, func(p *proc.Process) { got <- p.Wait() })
	})
	if err != nil {
		return err
	}
	ex, err := within(got, "the reaper to deliver the owned child's exit")
	if err != nil {
		return err
	}
	if ex.PID != p.PID() || ex.ExitCode != 7 || ex.Signal != 0 || ex.Wall <= 0 {
		return fmt.Errorf("delivered exit %+v, want pid %d code 7", ex, p.PID())
	}
	// The grandchild was reparented to us (subreaper) and must be reaped: no zombie left, counted as an orphan.
	err = testutil.Poll(fmt.Sprintf("the orphan %d reaped", gpid), func() error {
		if proc.Alive(gpid) || rp.Orphans() < 1 {
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", gpid))
			return fmt.Errorf("orphans=%d, stat %q", rp.Orphans(), st)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// A non-file stdio would need cmd.Wait's copying goroutines: refused.
	bad := exec.Command(os.Args[0])
	bad.Stdout = &bytes.Buffer{}
	if _, err := rp.Start(bad, nil); !errors.Is(err, proc.ErrNotStarted) {
		return fmt.Errorf("Start with a bytes.Buffer stdout: err %v, want ErrNotStarted", err)
	}
	return nil
}

// startOrphaner starts, with start, a child that starts a lingering grandchild, prints its pid and exits 7; it
// returns the child and the grandchild's pid.
func startOrphaner(start func(*exec.Cmd) (*proc.Process, error)) (*proc.Process, int, error) {
	cmd := testutil.Command("orphaner")
	r, w, err := os.Pipe()
	if err != nil {
		return nil, 0, err
	}
	cmd.Stdout = w
	p, err := start(cmd)
	w.Close()
	if err != nil {
		return nil, 0, err
	}
	var out bytes.Buffer
	_, _ = out.ReadFrom(r)
	gpid, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		return p, 0, fmt.Errorf("orphaner printed %q: %w", out.String(), err)
	}
	return p, gpid, nil
}

func TestReaperDeliversOwnExitsAndReapsOrphans(t *testing.T) {
	runMain(t, "reaper-main")
}

// TestReaperConcurrentStartsKeepTheirOwnStdio: starts on one reaper from several goroutines at once (two jobs in
// one process share its reaper and its forking threads) each give their child the stdout they were given. The
// forking thread took each batch's descriptors off its socket in the order the batches reached it, not the order
// they were sent: a child of one start wrote on another's pipe (seen once, under two CPU hogs: a line of
// TestExitCodes' rank 2 in TestTenThousandLinesArePrefixedWholeAndInOrder's output, both jobs in the launcher test
// binary). The window is a preemption between two calls; this stress did not hit it on an idle 2-core machine.
func TestReaperConcurrentStartsKeepTheirOwnStdio(t *testing.T) {
	runMain(t, "concurrent-starts-main")
}

func concurrentStartsMain() error {
	rp := proc.NewReaper(nil)
	defer rp.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 8*50)
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				id := fmt.Sprintf("%d-%d", g, i)
				r, w, err := os.Pipe()
				if err != nil {
					errs <- err
					return
				}
				cmd := exec.Command("/bin/echo", id)
				cmd.Stdout = w
				exited := make(chan struct{})
				_, err = rp.Start(cmd, func(*proc.Process) { close(exited) })
				w.Close()
				if err != nil {
					r.Close()
					errs <- err
					return
				}
				b, _ := io.ReadAll(r)
				r.Close()
				<-exited
				if got := strings.TrimSpace(string(b)); got != id {
					errs <- fmt.Errorf("the child started with id %s: its stdout read %q", id, got)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// TestReaperStartsForkingThreadsAsNeeded: a reaper starts one forking thread up front and another for every 4
// children of a start, up to one per core (forkThreads), when a start needs it, not all of them at once: a run of
// one worker started (and, at its exit, ended) a thread per core, 8 on a 16-core host, for one fork. Each thread
// keeps one socket open in the process, made as it starts: a start of 8 workers on a 16-core host had 12 open, 8
// of them for threads never started, and its descriptors outgrew the table's first 64 entries (see ReserveFDsAhead).
// Close leaves no socket of theirs open (the process kept a copy of each thread's end for good).
func TestReaperStartsForkingThreadsAsNeeded(t *testing.T) {
	runMain(t, "forking-threads-main")
}

func forkingThreadsMain() error {
	runtime.GOMAXPROCS(4) // four cores' worth, whatever this machine has
	sockets := func() (n int) {
		ents, _ := os.ReadDir("/proc/self/fd")
		for _, e := range ents {
			if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
				n++
			}
		}
		return n
	}
	before := sockets()
	rp := proc.NewReaper(nil)
	if err := checkForkingThreads(rp, func() int { return sockets() - before }); err != nil {
		rp.Close()
		return err
	}
	rp.Close()
	// Every thread's socket pair is closed, the process's copy of the thread's end too (it was kept for good).
	if n := sockets(); n != before {
		return fmt.Errorf("%d sockets open after the reaper closed, %d before it started", n, before)
	}
	return nil
}

// checkForkingThreads runs starts of growing size on rp and checks how many forking threads each leaves started, and
// that the process keeps one socket open for each (sockets counts those the reaper made).
func checkForkingThreads(rp *proc.Reaper, sockets func() int) error {
	if n := proc.ForkingThreads(rp); n != 1 {
		return fmt.Errorf("%d forking threads before any start, want 1 (set up while the caller prepares)", n)
	}
	for _, tc := range []struct{ start, want int }{{1, 1}, {4, 1}, {5, 2}, {2, 2}, {12, 3}, {40, 4}, {40, 4}} {
		cmds := make([]*exec.Cmd, tc.start)
		for i := range cmds {
			cmds[i] = exec.Command("/bin/true")
		}
		ps, err := proc.StartHeldAll(rp, cmds, nil, nil)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if ex := p.Release(); ex.ExitCode != 0 {
				return fmt.Errorf("/bin/true: %+v", ex)
			}
		}
		if n := proc.ForkingThreads(rp); n != tc.want {
			return fmt.Errorf("%d forking threads after a start of %d, want %d", n, tc.start, tc.want)
		}
		if n := sockets(); n != tc.want {
			return fmt.Errorf("%d sockets open in the process after a start of %d, want one per forking thread: %d", n, tc.start, tc.want)
		}
	}
	return nil
}

// TestReaperLateThreadKeepsNoStaleDescriptor: a forking thread started long after the reaper (on a start's need)
// keeps in its own table the runtime's descriptors the reaper listed when it started (an epoll set, an eventfd);
// one of those numbers closed and taken since by a worker's pipe must not be kept (a copy of a write end held
// by the thread would keep the worker's reader from its end of file until the reaper closes).
func TestReaperLateThreadKeepsNoStaleDescriptor(t *testing.T) {
	runMain(t, "late-thread-table-main")
}

func lateThreadTableMain() error {
	runtime.GOMAXPROCS(4) // room for threads started after the first
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return err
	}
	rp := proc.NewReaper(nil) // lists efd among the runtime's descriptors
	defer rp.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()
	if err := unix.Dup3(int(pw.Fd()), efd, unix.O_CLOEXEC); err != nil { // efd's number is a pipe's write end now
		return err
	}
	pw.Close()
	pipeID, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", efd))
	if err != nil {
		return err
	}
	cmds := make([]*exec.Cmd, 12)
	for i := range cmds {
		cmds[i] = exec.Command("/bin/true")
	}
	ps, err := proc.StartHeldAll(rp, cmds, nil, nil) // starts two more threads (one per 4 children)
	if err != nil {
		return err
	}
	for _, p := range ps {
		p.Release()
	}
	tids := proc.ForkingTids(rp)
	if len(tids) != 3 {
		return fmt.Errorf("%d forking threads after a start of 12, want 3", len(tids))
	}
	for _, tid := range tids[1:] {
		if l, err := os.Readlink(fmt.Sprintf("/proc/self/task/%d/fd/%d", tid, efd)); err == nil && l == pipeID {
			return fmt.Errorf("forking thread %d, started after the pipe took fd %d, holds it (%s)", tid, efd, l)
		}
	}
	return nil
}

// TestLateThreadForksChildrenWithSmallTables: a forking thread started once the process has hundreds of descriptors
// open (its socket pair is made as it starts, numbered past them) forks children whose descriptor tables have the
// first 64 entries, as the first thread's do: fork sizes a child's table for the highest descriptor open in its
// parent's, and the thread kept its socket at the high number (every child of it had a table of 1024 entries).
func TestLateThreadForksChildrenWithSmallTables(t *testing.T) {
	runMain(t, "late-thread-children-main")
}

func lateThreadChildrenMain() error {
	runtime.GOMAXPROCS(4) // room for threads started after the first
	rp := proc.NewReaper(nil)
	defer rp.Close()
	var fds []int
	defer func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}()
	for range 300 {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return err
		}
		fds = append(fds, p[0], p[1])
	}
	dir, err := os.MkdirTemp("", "late-thread-children-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cmds := make([]*exec.Cmd, 12) // three forking threads: two started now, past the 600 pipes
	for i := range cmds {
		cmds[i] = exec.Command("/bin/sh", "-c", `while read -r k v; do if [ "$k" = FDSize: ]; then echo "$v" > "$0"; fi; done < /proc/self/status`,
			filepath.Join(dir, strconv.Itoa(i)))
	}
	ps, err := proc.StartHeldAll(rp, cmds, nil, nil)
	if err != nil {
		return err
	}
	for _, p := range ps {
		p.Release()
	}
	if n := proc.ForkingThreads(rp); n != 3 {
		return fmt.Errorf("%d forking threads after a start of 12, want 3", n)
	}
	sizes := map[string][]int{}
	for i := range cmds {
		b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(i)))
		if err != nil {
			return err
		}
		sizes[strings.TrimSpace(string(b))] = append(sizes[strings.TrimSpace(string(b))], i)
	}
	if len(sizes) != 1 || len(sizes["64"]) != len(cmds) {
		return fmt.Errorf("the children's descriptor tables (entries: the children), want 64 for all: %v", sizes)
	}
	return nil
}

// TestReaperOutOfDescriptorsForDevNull: a start whose children need /dev/null (no stdio given) when the process is
// out of descriptors fails with an error that is EMFILE (so tpurun can name RLIMIT_NOFILE and what to raise; it
// said only "no /dev/null" once) and fails that start only: the next start, with descriptors again, runs.
func TestReaperOutOfDescriptorsForDevNull(t *testing.T) {
	runMain(t, "null-emfile-main")
}

func nullEMFILEMain() error {
	rp := proc.NewReaper(nil)
	defer rp.Close()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	fillers, err := exhaustDescriptors(lim)
	if err != nil {
		return err
	}
	_, err = rp.Start(testutil.Command("crash:5"), nil)
	for _, fd := range fillers {
		_ = syscall.Close(fd)
	}
	if serr := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); serr != nil {
		return serr
	}
	if !errors.Is(err, syscall.EMFILE) || !errors.Is(err, proc.ErrNotStarted) {
		return fmt.Errorf("start out of descriptors: err %v, want ErrNotStarted and EMFILE", err)
	}
	got := make(chan proc.Exit, 1)
	if _, err := rp.Start(testutil.Command("crash:5"), func(p *proc.Process) { got <- p.Wait() }); err != nil {
		return fmt.Errorf("start with descriptors again: %w", err)
	}
	ex, err := within(got, "the second start's exit")
	if err != nil {
		return err
	}
	if ex.ExitCode != 5 {
		return fmt.Errorf("second start exited %+v, want code 5", ex)
	}
	return nil
}

// exhaustDescriptors lowers the soft RLIMIT_NOFILE to just above the highest descriptor open and fills every free
// slot below it, so that the next open fails with EMFILE; it returns the fillers to close (then restore lim).
func exhaustDescriptors(lim syscall.Rlimit) ([]int, error) {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	high := 0
	for _, e := range es {
		if fd, err := strconv.Atoi(e.Name()); err == nil {
			high = max(high, fd)
		}
	}
	low := syscall.Rlimit{Cur: uint64(high + 1), Max: lim.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		return nil, err
	}
	var fillers []int
	for {
		fd, err := syscall.Open(os.DevNull, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if errors.Is(err, syscall.EMFILE) {
			return fillers, nil
		}
		if err != nil {
			return fillers, err
		}
		fillers = append(fillers, fd)
	}
}

func TestSetSubreaperIsReadBack(t *testing.T) {
	// PR_GET_CHILD_SUBREAPER (37) in a child, so this test process keeps its own parent semantics.
	cmd := testutil.Command("subreaper-get")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Fatalf("subreaper flag after SetSubreaper: %q (%v), want 1", out, err)
	}
}

func subreaperGet() int {
	if err := proc.SetSubreaper(); err != nil {
		fmt.Println(err)
		return 1
	}
	var v int32
	if _, _, e := syscall.Syscall(syscall.SYS_PRCTL, 37, uintptr(unsafe.Pointer(&v)), 0); e != 0 {
		fmt.Println(e)
		return 1
	}
	fmt.Println(v)
	return 0
}

// within waits for ch to deliver (testutil.Deadline at most): for the checks that run in a re-executed test
// binary and report an error rather than failing a test.
func within[T any](ch <-chan T, what string) (T, error) {
	timer := time.NewTimer(testutil.Deadline())
	defer timer.Stop()
	select {
	case v := <-ch:
		return v, nil
	case <-timer.C:
		var zero T
		return zero, fmt.Errorf("waited %s for %s", testutil.Deadline(), what)
	}
}
