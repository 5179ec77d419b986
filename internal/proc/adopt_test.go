package proc_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tpurun/internal/proc"
	"tpurun/internal/testutil"
)

// The adoption tests run in re-executed test binaries, so that the subreaper bit and the wait4(-1) loop never touch
// the other tests' children.
func init() {
	testutil.Define(testutil.Verb{Name: "adopt-main", Run: func(*testutil.Worker) int { return okOr(adoptMain()) },
		Spawns: []string{"adopt-mid"}})
	testutil.Define(testutil.Verb{Name: "keep-main", Run: func(*testutil.Worker) int { return okOr(keepMain()) },
		Spawns: []string{"hang-parent"}})
	// what a zygote's intermediate process does: fork the worker in its own group, say its pid, exit
	testutil.Define(testutil.Verb{Name: "adopt-mid", Spawns: []string{"adopt-worker"}, Run: func(w *testutil.Worker) int {
		c := w.Child("adopt-worker")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		fmt.Println(c.Process.Pid)
		return 0
	}})
	// exits at once: its exit may come before it is adopted
	testutil.Define(testutil.Verb{Name: "adopt-worker", Run: func(*testutil.Worker) int { return 9 }})
	// start a sleeping child (its stdout /dev/null: only our line is read), say its pid, sleep
	testutil.Define(testutil.Verb{Name: "hang-parent", Spawns: []string{"adopt-sleep"}, Run: func(w *testutil.Worker) int {
		c := w.Child("adopt-sleep")
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		fmt.Println(c.Process.Pid)
		return sleepForever()
	}})
	testutil.Define(testutil.Verb{Name: "adopt-sleep", Run: func(*testutil.Worker) int { return sleepForever() }})
}

// sleepForever sleeps until killed (a bare select{} would trip the runtime's deadlock detector).
func sleepForever() int {
	for {
		time.Sleep(time.Hour)
	}
}

// forkAdoptable does what a zygote does for AdoptHeld: an intermediate process forks the worker and exits; once it
// is reaped the worker is re-parented to this process, the subreaper, and its pid is returned.
func forkAdoptable() (int, error) {
	mid := testutil.Command("adopt-mid")
	out, err := mid.Output() // reaps the intermediate: the reaper's loop is held off by AdoptHeld's lock
	if err != nil {
		return 0, fmt.Errorf("intermediate: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return 0, err
	}
	// Give a reaper that is not held off every chance to take the worker for an orphan: wait until it is our
	// zombie, then a while for it to vanish (it must not: the lock is held until it is registered).
	_ = testutil.Poll("the adopted worker to be our zombie", func() error {
		if state(pid) != "Z" {
			return errors.New("not yet")
		}
		return nil
	})
	for deadline := time.Now().Add(300 * time.Millisecond); proc.Alive(pid) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	return pid, nil
}

func adoptMain() error {
	if err := proc.SetSubreaper(); err != nil {
		return err
	}
	rp := proc.NewReaper(nil)
	defer rp.Close()
	got := make(chan proc.Exit, 1)
	p, err := rp.AdoptHeld(forkAdoptable, func(p *proc.Process) { got <- p.Status() })
	if err != nil {
		return err
	}
	ex, err := within(got, "the exit of the adopted worker")
	if err != nil {
		return err
	}
	if ex.PID != p.PID() || ex.ExitCode != 9 {
		return fmt.Errorf("delivered exit %+v, want pid %d code 9", ex, p.PID())
	}
	if st := state(p.PID()); st != "Z" {
		return fmt.Errorf("adopted worker %d is in state %q, want a zombie (Z) until released", p.PID(), st)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("signal a held adopted zombie: %w", err)
	}
	ex = p.Release()
	if ex.ExitCode != 9 || ex.MaxRSS <= 0 {
		return fmt.Errorf("released exit %+v, want code 9 with resource usage", ex)
	}
	if proc.Alive(p.PID()) {
		return fmt.Errorf("pid %d still exists after Release", p.PID())
	}
	if n := rp.Orphans(); n != 0 { // the intermediate was reaped by Output; the worker is owned
		return fmt.Errorf("the reaper counted %d orphans, want 0: the adopted worker's exit was taken for an orphan's", n)
	}
	// A process that is not our child (our own parent) is refused, and nothing is registered.
	_, err = rp.AdoptHeld(func() (int, error) { return os.Getppid(), nil }, nil)
	if !errors.Is(err, proc.ErrNotChild) {
		return fmt.Errorf("adopting the parent: err %v, want ErrNotChild", err)
	}
	return nil
}

// keepMain: Sweep leaves a kept process alive and kills its descendants.
func keepMain() error {
	if err := proc.SetSubreaper(); err != nil {
		return err
	}
	rp := proc.NewReaper(nil)
	defer rp.Close()
	kept := testutil.Command("hang-parent")
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	kept.Stdout = w
	done := make(chan proc.Exit, 1)
	p, err := rp.Start(kept, func(p *proc.Process) { done <- p.Wait() })
	w.Close()
	if err != nil {
		return err
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		return fmt.Errorf("kept process: %w", err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return err
	}
	rp.Keep(p)
	swept, err := rp.Sweep("/proc")
	if err != nil {
		return err
	}
	if len(swept) != 1 || swept[0] != child {
		return fmt.Errorf("swept %v, want only the kept process's child %d", swept, child)
	}
	if !proc.Alive(p.PID()) || state(p.PID()) == "Z" {
		return fmt.Errorf("the kept process %d was killed by the sweep", p.PID())
	}
	_ = p.Signal(syscall.SIGKILL)
	_, err = within(done, "the kept process to exit after SIGKILL")
	return err
}

// TestAdoptHeld: a worker forked by another process and re-parented to this subreaper is supervised like one it
// started: its exit (which comes before the adoption is done) is delivered, not reaped as an orphan's; it is held
// as a zombie until Release, which gives its resource usage. A process that is not a child is refused.
func TestAdoptHeld(t *testing.T) {
	runMain(t, "adopt-main")
}

// TestSweepSparesKept: the sweep leaves a kept process (the preloaded interpreter) alive and kills its children.
func TestSweepSparesKept(t *testing.T) {
	cmd := testutil.Command("keep-main")
	f, err := os.Create(t.TempDir() + "/out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	err = cmd.Run()
	out, _ := os.ReadFile(f.Name())
	if err != nil || !strings.Contains(string(out), "OK") {
		t.Fatalf("keep child: %v\n%s", err, out)
	}
}

func init() {
	testutil.Define(testutil.Verb{Name: "adopt-wedged-main", Run: func(*testutil.Worker) int { return okOr(adoptWedgedMain()) }})
}

// adoptWedgedMain: while an adoption waits for its fork (a preloaded interpreter that is stopped, or slow to
// answer), the processes already started are signalled and their exits delivered: control does not wait for it.
func adoptWedgedMain() error {
	if err := proc.SetSubreaper(); err != nil {
		return err
	}
	rp := proc.NewReaper(nil)
	defer rp.Close()
	got := make(chan proc.Exit, 1)
	p, err := proc.StartHeld(rp, exec.Command("/bin/sleep", "3600"), func(p *proc.Process) { got <- p.Status() })
	if err != nil {
		return err
	}
	defer p.Release()
	wedged, forking := make(chan struct{}), make(chan struct{})
	adopted := make(chan error, 1)
	go func() {
		_, err := rp.AdoptHeld(func() (int, error) {
			close(forking)
			<-wedged
			return 0, errors.New("the interpreter did not answer")
		}, nil)
		adopted <- err
	}()
	<-forking
	signalled := make(chan error, 1)
	go func() { signalled <- p.Signal(syscall.SIGTERM) }()
	err, werr := within(signalled, "SIGTERM to a started worker while an adoption waits for its fork")
	if werr == nil && err == nil {
		_, werr = within(got, "the exit of the worker that got SIGTERM while an adoption waits for its fork")
	}
	close(wedged)
	if _, aerr := within(adopted, "the wedged adoption to return"); aerr != nil {
		return aerr
	}
	if werr != nil {
		return werr
	}
	return err
}

// TestAdoptionWaitingForItsForkBlocksNoSignal: see adoptWedgedMain.
func TestAdoptionWaitingForItsForkBlocksNoSignal(t *testing.T) {
	runMain(t, "adopt-wedged-main")
}
