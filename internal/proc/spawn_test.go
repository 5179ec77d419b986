package proc_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"tpurun/internal/proc"
	"tpurun/internal/testutil"
)

// The forking thread's and the pidfd set's tests run in re-executed test binaries, as the reaper's do.
func init() {
	testutil.Define(testutil.Verb{Name: "waits-main", Run: func(*testutil.Worker) int { return okOr(waitsMain()) }})
	testutil.Define(testutil.Verb{Name: "table-main", Run: func(*testutil.Worker) int { return okOr(tableMain()) }})
	testutil.Define(testutil.Verb{Name: "fallback-main", Spawns: []string{"orphaner"},
		Run: func(w *testutil.Worker) int { return okOr(fallbackMain(w.Arg)) }})
}

// gated starts n held children through rp in one StartHeldAll, each waiting until its stdin (the read end of
// gates[i]'s pipe) ends, then exiting 3; its exit goes to got.
func gated(rp *proc.Reaper, n int, got chan<- proc.Exit) (ps []*proc.Process, gates []*os.File, err error) {
	cmds := make([]*exec.Cmd, n)
	onExit := make([]func(*proc.Process), n)
	var reads []*os.File
	defer func() {
		for _, f := range reads {
			f.Close()
		}
	}()
	for i := range n {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, gates, err
		}
		reads, gates = append(reads, r), append(gates, w)
		cmds[i] = exec.Command("/bin/sh", "-c", "read x; exit 3")
		cmds[i].Stdin = r
		onExit[i] = func(p *proc.Process) { got <- p.Status() }
	}
	ps, err = proc.StartHeldAll(rp, cmds, onExit, nil)
	if err == nil && (len(ps) != n || slices.Contains(ps, nil)) {
		err = fmt.Errorf("StartHeldAll gave %d processes for %d commands, some nil, and no error", len(ps), n)
	}
	return ps, gates, err
}

// openGates lets the gated children exit one after the other, each once the last one's exit was delivered, and
// releases them all.
func openGates(ps []*proc.Process, gates []*os.File, got <-chan proc.Exit) error {
	for i, p := range ps {
		if p.Exited() {
			return fmt.Errorf("child %d (pid %d) Exited before its gate opened", i, p.PID())
		}
		gates[i].Close()
		ex, err := within(got, fmt.Sprintf("the exit of child %d of %d", i, len(ps)))
		if err != nil {
			return err
		}
		if ex.PID != p.PID() || ex.ExitCode != 3 || !p.Exited() {
			return fmt.Errorf("child %d: delivered exit %+v (Exited %v), want pid %d code 3", i, ex, p.Exited(), p.PID())
		}
	}
	for _, p := range ps {
		if ex := p.Release(); ex.ExitCode != 3 || !p.Exited() {
			return fmt.Errorf("released exit %+v (Exited %v), want code 3", ex, p.Exited())
		}
	}
	return nil
}

// waitsMain: each exit of a child started through the reaper costs it one look at that child, however many
// children it has (a held zombie among them included): not a look at every child on each SIGCHLD.
func waitsMain() error {
	counts := proc.CountWaits()
	if err := proc.SetSubreaper(); err != nil {
		return err
	}
	rp := proc.NewReaper(nil)
	defer rp.Close()
	const n = 32
	got := make(chan proc.Exit, n)
	ps, gates, err := gated(rp, n, got)
	if err != nil {
		return err
	}
	if err := openGates(ps, gates, got); err != nil {
		return err
	}
	if one, _ := counts(); one > 2*n {
		return fmt.Errorf("the reaper looked at one child %d times for %d exits; want at most %d (one per exit, and "+
			"a few for wake-ups that were not exits): it looks at every child on each exit", one, n, 2*n)
	}
	return nil
}

// TestReaperLooksAtOneChildPerExit: the exits of the children started through the reaper come from their pidfds,
// one event each: the reaper's work per exit does not grow with the number of children.
func TestReaperLooksAtOneChildPerExit(t *testing.T) {
	runMain(t, "waits-main")
}

// tableMain: the thread that forks the children has a descriptor table of its own that holds none of the process's
// descriptors (the pipes of every running worker): fork copies that table, and exec closes it, for each child.
func tableMain() error {
	if err := proc.SetSubreaper(); err != nil {
		return err
	}
	rp := proc.NewReaper(nil)
	defer rp.Close()
	var open []*os.File
	defer func() {
		for _, f := range open {
			f.Close()
		}
	}()
	for range 200 {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		open = append(open, r, w)
	}
	got := make(chan proc.Exit, 8)
	ps, gates, err := gated(rp, 8, got)
	if err != nil {
		return err
	}
	tid, private := proc.ForkingTable(rp)
	if tid == 0 || !private {
		fmt.Println("SKIP: no forking thread with a table of its own on this kernel (close_range CLOSE_RANGE_UNSHARE)")
		return openGates(ps, gates, got)
	}
	ents, err := os.ReadDir("/proc/self/task/" + strconv.Itoa(tid) + "/fd")
	if err != nil {
		return err
	}
	all, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	if len(ents) > 16 || len(all) < 400 {
		return fmt.Errorf("the forking thread's table holds %d descriptors (the process's %d): want a handful", len(ents), len(all))
	}
	return openGates(ps, gates, got)
}

func TestForkingThreadHoldsNoWorkerDescriptors(t *testing.T) {
	out, err := testutil.Command("table-main").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK") {
		t.Fatalf("reaper child: %v\n%s", err, out)
	}
	if s := string(out); strings.Contains(s, "SKIP") {
		t.Skip(s)
	}
}

// fallbackMain runs the reaper's checks as on a kernel that gives less: no pidfds (the children are listed on
// each SIGCHLD), no table of its own for the forking thread, or no forking thread at all.
func fallbackMain(mode string) error {
	switch mode {
	case "no-pidfd":
		proc.WithoutPidfd()
	case "shared-table":
		proc.WithSharedTable()
	case "no-forking-thread":
		proc.WithoutForkingThread()
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}
	if err := proc.SetSubreaper(); err != nil {
		return err
	}
	rp := proc.NewReaper(nil)
	defer rp.Close()
	tid, private := proc.ForkingTable(rp)
	if mode == "shared-table" && (tid == 0 || private) || mode == "no-forking-thread" && tid != 0 {
		return fmt.Errorf("%s: forking thread %d, own table %v", mode, tid, private)
	}
	if err := heldCheck(rp); err != nil {
		return err
	}
	if err := ownedAndOrphan(rp); err != nil {
		return err
	}
	const n = 8
	exits := make(chan proc.Exit, n)
	ps, gates, err := gated(rp, n, exits)
	if err != nil {
		return err
	}
	return openGates(ps, gates, exits)
}

// ownedAndOrphan: the exit of a child started through rp is delivered, and the grandchild it leaves is reaped.
func ownedAndOrphan(rp *proc.Reaper) error {
	got := make(chan proc.Exit, 1)
	p, gpid, err := startOrphaner(func(cmd *exec.Cmd) (*proc.Process, error) {
		return rp.Start(cmd, func(p *proc.Process) { got <- p.Wait() })
	})
	if err != nil {
		return err
	}
	if ex, err := within(got, "the owned child's exit"); err != nil || ex.PID != p.PID() || ex.ExitCode != 7 {
		return fmt.Errorf("delivered exit %+v (%v), want pid %d code 7", ex, err, p.PID())
	}
	return testutil.Poll(fmt.Sprintf("the orphan %d reaped", gpid), func() error {
		if proc.Alive(gpid) {
			return errors.New("still there")
		}
		return nil
	})
}

// TestReaperFallbacks: held workers, owned exits and orphans work as well where the kernel gives no pidfd, no
// table of its own to the forking thread, or where there is no forking thread.
func TestReaperFallbacks(t *testing.T) {
	for _, mode := range []string{"no-pidfd", "shared-table", "no-forking-thread"} {
		t.Run(mode, func(t *testing.T) {
			runMain(t, "fallback-main:"+mode)
		})
	}
}

func init() {
	testutil.Define(testutil.Verb{Name: "fail-main", Run: func(*testutil.Worker) int { return okOr(failMain()) }})
}

// failMain: a command that cannot be started in the middle of a list is named by its index (a *StartError that
// wraps why), with no process; those that started (before it, or after it on another forking thread) exit as any.
func failMain() error {
	if err := proc.SetSubreaper(); err != nil {
		return err
	}
	rp := proc.NewReaper(nil)
	defer rp.Close()
	const n, bad = 12, 5
	got := make(chan proc.Exit, n)
	cmds := make([]*exec.Cmd, n)
	onExit := make([]func(*proc.Process), n)
	for i := range cmds {
		cmds[i] = exec.Command("/bin/sh", "-c", "exit 4")
		onExit[i] = func(p *proc.Process) { got <- p.Status() }
	}
	cmds[bad] = exec.Command("/nonexistent/program")
	ps, err := proc.StartHeldAll(rp, cmds, onExit, nil)
	var se *proc.StartError
	if !errors.As(err, &se) || se.Index != bad || !errors.Is(err, syscall.ENOENT) || !errors.Is(err, proc.ErrNotStarted) {
		return fmt.Errorf("StartHeldAll with command %d missing: %v, want a *StartError at %d wrapping ENOENT", bad, err, bad)
	}
	if len(ps) != n || ps[bad] != nil {
		return fmt.Errorf("processes %v: want one per command, none at %d", ps, bad)
	}
	for _, p := range ps {
		if p == nil {
			continue
		}
		if ex, err := within(got, "an exit"); err != nil || ex.ExitCode != 4 {
			return fmt.Errorf("exit %+v (%v), want code 4", ex, err)
		}
		if ex := p.Release(); ex.ExitCode != 4 {
			return fmt.Errorf("released %+v, want code 4", ex)
		}
	}
	// more says no: nothing more is started, and that is no error.
	ps, err = proc.StartHeldAll(rp, cmds[:3], onExit, func() bool { return false })
	if err != nil || len(ps) != 3 || slices.ContainsFunc(ps, func(p *proc.Process) bool { return p != nil }) {
		return fmt.Errorf("StartHeldAll told to stop at once: %v, %v; want no process and no error", ps, err)
	}
	return nil
}

// TestStartHeldAllNamesTheCommandThatFailed: see failMain.
func TestStartHeldAllNamesTheCommandThatFailed(t *testing.T) {
	runMain(t, "fail-main")
}

func init() {
	testutil.Define(testutil.Verb{Name: "fdlimit-main", Run: func(*testutil.Worker) int { return okOr(fdLimitMain()) }})
}

// warmReaper makes a subreaper's reaper and starts one child through it, so that what the reaper keeps open
// (/dev/null for the children's stdio) is open before a test takes the descriptors away.
func warmReaper() (*proc.Reaper, error) {
	if err := proc.SetSubreaper(); err != nil {
		return nil, err
	}
	rp := proc.NewReaper(nil)
	warm := make(chan proc.Exit, 1)
	if _, err := rp.Start(exec.Command("/bin/true"), func(p *proc.Process) { warm <- p.Wait() }); err != nil {
		return rp, err
	}
	_, err := within(warm, "the first child's exit")
	return rp, err
}

// lowerFileLimit sets RLIMIT_NOFILE's soft limit to cur; restore sets it back.
func lowerFileLimit(cur uint64) (restore func(), err error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return nil, err
	}
	low := lim
	low.Cur = cur
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		return nil, err
	}
	return func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) }, nil
}

// pipedCmds are n commands that exit 5, each with three pipes of its own as stdio, and every end of those pipes.
func pipedCmds(n int) (cmds []*exec.Cmd, open []*os.File, err error) {
	cmds = make([]*exec.Cmd, n)
	for i := range cmds {
		cmds[i] = exec.Command("/bin/sh", "-c", "exit 5")
		var ends [3]*os.File
		for k := range ends {
			r, w, err := os.Pipe()
			if err != nil {
				return nil, open, err
			}
			open = append(open, r, w)
			ends[k] = w
		}
		cmds[i].Stdin, cmds[i].Stdout, cmds[i].Stderr = ends[0], ends[1], ends[2]
	}
	return cmds, open, nil
}

// exitsTo is one onExit per command, each sending the exit to got.
func exitsTo(got chan<- proc.Exit, n int) []func(*proc.Process) {
	onExit := make([]func(*proc.Process), n)
	for i := range onExit {
		onExit[i] = func(p *proc.Process) { got <- p.Status() }
	}
	return onExit
}

// fdLimitMain: when the forking thread's table cannot take every descriptor of a batch (RLIMIT_NOFILE lowered
// while the launcher runs, by prlimit or the launcher's own caller), the kernel passes some and drops the rest
// (MSG_CTRUNC). The start fails, naming the limit, instead of waiting forever for descriptors that will never
// come; and the next start through the same reaper works, with each child's own files.
func fdLimitMain() error {
	rp, err := warmReaper()
	if err != nil {
		return err
	}
	const n = 96 // 3 descriptors each: more than a forking thread's table takes under the limit, however many threads
	cmds, open, err := pipedCmds(n)
	defer func() {
		for _, f := range open {
			f.Close()
		}
	}()
	if err != nil {
		return err
	}
	restore, err := lowerFileLimit(32)
	if err != nil {
		return err
	}
	type result struct {
		ps  []*proc.Process
		err error
	}
	done := make(chan result, 1)
	go func() {
		ps, err := proc.StartHeldAll(rp, cmds, exitsTo(make(chan proc.Exit, n), n), nil)
		done <- result{ps, err}
	}()
	res, err := within(done, "StartHeldAll under RLIMIT_NOFILE 32 (the forking thread waits for descriptors the kernel dropped)")
	if err != nil {
		return err // rp is not closed: its forking thread is stuck
	}
	restore()
	if res.err == nil || !errors.Is(res.err, syscall.EMFILE) {
		return fmt.Errorf("StartHeldAll under RLIMIT_NOFILE 32: %v; want an error wrapping EMFILE", res.err)
	}
	for _, p := range res.ps {
		if p != nil {
			p.Release()
		}
	}
	exits := make(chan proc.Exit, 8)
	ps, gates, err := gated(rp, 8, exits)
	if err != nil {
		return err
	}
	if err := openGates(ps, gates, exits); err != nil {
		return err
	}
	rp.Close()
	return nil
}

// TestStartFailsWhenTheForkingThreadRunsOutOfDescriptors: see fdLimitMain.
func TestStartFailsWhenTheForkingThreadRunsOutOfDescriptors(t *testing.T) {
	runMain(t, "fdlimit-main")
}

func init() {
	testutil.Define(testutil.Verb{Name: "pending-main", Run: func(*testutil.Worker) int { return okOr(pendingMain()) }})
}

// fillTable lowers RLIMIT_NOFILE to 64 and opens /dev/null until no descriptor is left; restore undoes both.
func fillTable() (restore func(), err error) {
	unlimit, err := lowerFileLimit(64)
	if err != nil {
		return nil, err
	}
	var fill []*os.File
	restore = func() {
		for _, f := range fill {
			f.Close()
		}
		unlimit()
	}
	for {
		f, err := os.Open(os.DevNull)
		if errors.Is(err, syscall.EMFILE) {
			return restore, nil
		}
		if err != nil {
			restore()
			return nil, err
		}
		fill = append(fill, f)
	}
}

// pendingMain: while the launcher's table is full, the reaper gets no pidfd for a child (its exit is found by
// listing the children) and cannot list the children either (it reaps whatever exited, wait4(-1)): a child of a
// batch still being forked may be reaped before it is put under watch. It is delivered once, and the reaper
// forgets it: once every child is released and the table has room again, each exit costs one look at one child,
// as before.
func pendingMain() error {
	counts := proc.CountWaits()
	rp, err := warmReaper()
	if err != nil {
		return err
	}
	defer rp.Close()
	restore, err := fillTable()
	if err != nil {
		return err
	}
	err = startWithTableFull(rp)
	restore()
	if err != nil {
		return err
	}
	before, _ := counts()
	const m = 32
	exits := make(chan proc.Exit, m)
	gps, gates, err := gated(rp, m, exits)
	if err != nil {
		return err
	}
	if err := openGates(gps, gates, exits); err != nil {
		return err
	}
	if one, _ := counts(); one-before > 2*m {
		return fmt.Errorf("after a start with the table full, the reaper looked at one child %d times for %d exits; "+
			"want at most %d: it still lists every child on each exit, for a child it reaped before watching it",
			one-before, m, 2*m)
	}
	return nil
}

// startWithTableFull starts, through rp and with no descriptor left, a child that runs (found by listing) and then
// 64 that exit at once; it checks each exit and releases them all.
func startWithTableFull(rp *proc.Reaper) error {
	long, err := proc.StartHeld(rp, exec.Command("/bin/sleep", "3600"), nil)
	if err != nil {
		return err
	}
	defer func() {
		_ = long.Signal(syscall.SIGKILL)
		long.Release()
	}()
	const n = 64
	got := make(chan proc.Exit, n)
	cmds := make([]*exec.Cmd, n)
	for i := range cmds {
		cmds[i] = exec.Command("/bin/true")
	}
	ps, err := proc.StartHeldAll(rp, cmds, exitsTo(got, n), nil)
	if err != nil {
		return err
	}
	for range ps {
		if ex, err := within(got, "an exit"); err != nil || ex.ExitCode != 0 {
			return fmt.Errorf("exit %+v (%v), want code 0", ex, err)
		}
	}
	for _, p := range ps {
		if ex := p.Release(); ex.ExitCode != 0 {
			return fmt.Errorf("released %+v, want code 0", ex)
		}
	}
	return nil
}

// TestChildReapedBeforeItsWatchIsForgotten: see pendingMain.
func TestChildReapedBeforeItsWatchIsForgotten(t *testing.T) {
	runMain(t, "pending-main")
}

func init() {
	testutil.Define(testutil.Verb{Name: "reserve-fds-main", Run: func(*testutil.Worker) int { return okOr(reserveFDsMain()) }})
}

// TestReserveFDsGrowsTheTableOnce: a reservation whose least fits leaves the table alone; one whose least does not
// returns having begun the growth, the table reaches the size asked in one step, another reservation for the same
// burst needs none, and most descriptors opened after it find room without another growth. In a re-executed binary:
// its table is its own, and no other test opens descriptors in it meanwhile.
func TestReserveFDsGrowsTheTableOnce(t *testing.T) { runMain(t, "reserve-fds-main") }

func reserveFDsMain() error {
	self := os.Getpid()
	size := testutil.FDTableSize(self)
	if size == 0 {
		return errors.New("no FDSize in /proc/self/status")
	}
	begun, room := proc.ReserveFDsAhead(1, 8*size)
	if begun != nil {
		return fmt.Errorf("a reservation of at least 1 descriptor in a table of %d began a growth", size)
	}
	if room <= 2 || room >= size {
		return fmt.Errorf("room %d in a table of %d (3 descriptors at least are open)", room, size)
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return err
	}
	_, after := proc.ReserveFDsAhead(1, 8*size)
	_, _ = unix.Close(p[0]), unix.Close(p[1])
	if after > room-2 {
		return fmt.Errorf("room %d with a pipe more open, %d without", after, room)
	}
	most := 3 * size
	begun, _ = proc.ReserveFDsAhead(size, most)
	if begun == nil {
		return fmt.Errorf("a reservation of at least %d descriptors in a table of %d began no growth", size, size)
	}
	<-begun
	if err := testutil.Poll(fmt.Sprintf("the table grown to %d entries at least", size+most), func() error {
		if now := testutil.FDTableSize(self); now < size+most {
			return fmt.Errorf("it has %d", now)
		}
		return nil
	}); err != nil {
		return err
	}
	grown := testutil.FDTableSize(self)
	if again, _ := proc.ReserveFDsAhead(size, most); again != nil {
		return fmt.Errorf("a reservation for the burst reserved already began another growth (table of %d entries)", grown)
	}
	var fds []int
	defer func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}()
	for len(fds) < most {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return fmt.Errorf("pipe %d: %w", len(fds)/2, err)
		}
		fds = append(fds, p[0], p[1])
	}
	if now := testutil.FDTableSize(self); now != grown {
		return fmt.Errorf("%d descriptors opened after a reservation of %d grew the table again: %d entries, then %d", len(fds), most, grown, now)
	}
	return nil
}
