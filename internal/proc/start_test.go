package proc_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"tpurun/internal/proc"
	"tpurun/internal/testutil"
)

// The starter's and the pidfd set's tests run in re-executed test binaries, as the reaper's do.
func init() {
	testutil.Define(testutil.Verb{Name: "waits-main", Run: func(*testutil.Worker) int { return okOr(waitsMain()) }})
	testutil.Define(testutil.Verb{Name: "starter-main", Run: func(*testutil.Worker) int { return okOr(starterMain()) }})
	testutil.Define(testutil.Verb{Name: "no-pidfd-main", Spawns: []string{"orphaner"},
		Run: func(*testutil.Worker) int { return okOr(noPidfdMain()) }})
}

// gated starts n held children through rp, each waiting until its stdin (the read end of
// gates[i]'s pipe) ends, then exiting 3; its exit goes to got.
func gated(rp *proc.Reaper, n int, got chan<- proc.Exit) (ps []*proc.Process, gates []*os.File, err error) {
	var reads []*os.File
	defer func() {
		for _, f := range reads {
			f.Close()
		}
	}()
	for range n {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, gates, err
		}
		reads, gates = append(reads, r), append(gates, w)
		cmd := exec.Command("/bin/sh", "-c", "read x; exit 3")
		cmd.Stdin = r
		p, err := proc.StartHeld(rp, cmd, func(p *proc.Process) { got <- p.Status() })
		if err != nil {
			return ps, gates, err
		}
		ps = append(ps, p)
	}
	return ps, gates, nil
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

// noPidfdMain runs the reaper's checks as on a kernel without pidfds: the children are listed on each SIGCHLD.
func noPidfdMain() error {
	proc.WithoutPidfd()
	if err := proc.SetSubreaper(); err != nil {
		return err
	}
	rp := proc.NewReaper(nil)
	defer rp.Close()
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

// TestReaperWithoutPidfd: held workers, owned exits and orphans work as well where the kernel gives no pidfd.
func TestReaperWithoutPidfd(t *testing.T) {
	runMain(t, "no-pidfd-main")
}

// starterMain: the processes started through a reaper, within Starting or not, are children of one thread, the
// same for every start and not the process's first (whose list of children holds the orphans only), and Close ends that thread: a child
// still running gets its parent-death signal, SIGKILL.
func starterMain() error {
	rp := proc.NewReaper(nil)
	tid := proc.StarterTid(rp)
	if tid == 0 || tid == os.Getpid() {
		rp.Close()
		return fmt.Errorf("starter thread %d, process %d: want a thread of its own", tid, os.Getpid())
	}
	var ps []*proc.Process
	var err error
	start := func() {
		var p *proc.Process
		if p, err = rp.Start(exec.Command("/bin/sleep", "60"), nil); err == nil {
			ps = append(ps, p)
		}
	}
	start()
	rp.Starting(func() { // two starts run on the starter's thread at once, as one from outside does
		for range 2 {
			if start(); err != nil {
				return
			}
		}
	})
	if err != nil || len(ps) != 3 {
		rp.Close()
		return fmt.Errorf("%d started: %v", len(ps), err)
	}
	kids, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/children", tid))
	if err != nil {
		rp.Close()
		return err
	}
	for _, p := range ps {
		if !slices.Contains(strings.Fields(string(kids)), strconv.Itoa(p.PID())) {
			rp.Close()
			return fmt.Errorf("pid %d is not a child of the starter thread %d (its children: %q)", p.PID(), tid, kids)
		}
	}
	rp.Close()
	for _, p := range ps {
		if err := testutil.Poll(fmt.Sprintf("pid %d killed by its parent-death signal", p.PID()), func() error {
			var info unix.Siginfo
			err := unix.Waitid(unix.P_PID, p.PID(), &info, unix.WEXITED|unix.WNOHANG, nil)
			switch {
			case err != nil:
				return err
			case info.Signo == 0:
				return errors.New("still running")
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// TestReaperStarterThread: see starterMain.
func TestReaperStarterThread(t *testing.T) { runMain(t, "starter-main") }
