package testutil

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

// TestVerbRegistry: a verb counts as used when a test names it, with what it spawns and what they spawn; the
// others are reported unused; a name nobody registered panics where a test names it.
func TestVerbRegistry(t *testing.T) {
	saved, savedUsed := verbs, used
	t.Cleanup(func() { verbs, used = saved, savedUsed })
	verbs, used = map[string]Verb{}, map[string]bool{}
	nop := func(*Worker) int { return 0 }
	Define(Verb{Name: "a", Run: nop, Spawns: []string{"b"}})
	Define(Verb{Name: "b", Run: nop, Spawns: []string{"c"}})
	Define(Verb{Name: "c", Run: nop})
	Define(Verb{Name: "lonely", Run: nop})
	Register("hang")
	if got := Fake("a:3"); got != "TPURUN_FAKE=a:3" {
		t.Fatalf("Fake: %q", got)
	}
	if got := FakeRank(2, "hang"); got != "TPURUN_FAKE_2=hang" {
		t.Fatalf("FakeRank: %q", got)
	}
	if got := unused(); !slices.Equal(got, []string{"lonely"}) {
		t.Fatalf("unused %v, want [lonely] (c is spawned by b, which a spawns)", got)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "typo") {
			t.Fatalf("an unregistered verb: recovered %v, want a panic naming it", r)
		}
	}()
	Fake("typo")
}

// TestFakeWorkerRuns: the test binary started with FAKE_VERB runs the verb and exits with its code; the verb's
// own children do not inherit FAKE_VERB.
func TestFakeWorkerRuns(t *testing.T) {
	cmd := Command("exit:7")
	cmd.Env = append(cmd.Env, "RANK=3")
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !strings.Contains(string(out), "rank 3 exits 7") || !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("exit:7 printed %q and ended %v, want exit 7", out, err)
	}
}

// TestHeavyIsExclusive: two heavy tests never hold the slot at once.
func TestHeavyIsExclusive(t *testing.T) {
	var holders, most atomic.Int32
	for i := range 4 {
		t.Run(string(rune('a'+i)), func(t *testing.T) {
			t.Parallel()
			Heavy(t)
			n := holders.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			t.Cleanup(func() { holders.Add(-1) })
		})
	}
	t.Cleanup(func() {
		if most.Load() != 1 {
			t.Errorf("%d heavy tests held the slot at once, want 1", most.Load())
		}
	})
}

func TestMain(m *testing.M) {
	Register("exit")
	Dispatch()
	// This binary's heavy tests take a lock of their own, not the one the suite's heavy tests share.
	dir, err := os.MkdirTemp("", "testutil-")
	if err != nil {
		panic(err)
	}
	if os.Getenv("LAUNCHERTEST_HEAVY_CHILD") == "" {
		heavyLock = func() string { return filepath.Join(dir, "heavy.lock") }
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestHeavyTwiceInOneTest: a test that takes the slot twice (an etcd, then a world of many nodes) does not wait
// for itself.
func TestHeavyTwiceInOneTest(t *testing.T) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.Run("twice", func(t *testing.T) {
			Heavy(t)
			Heavy(t)
		})
	}()
	Done(t, "a second Heavy of the same test to return", done)
}

// TestHeavyInsideHeavy: a test binary started by a heavy test (a test that runs go test, as a user would) takes
// its slot without waiting for the lock its ancestor holds.
func TestHeavyInsideHeavy(t *testing.T) {
	Heavy(t)
	cmd := exec.Command(Executable(), "-test.run=^TestHeavyChild$", "-test.v")
	cmd.Env = append(os.Environ(), "LAUNCHERTEST_HEAVY_CHILD="+heavyLock())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestHeavyChild") {
		t.Fatalf("the child test: %v\n%s", err, out)
	}
}

// TestHeavyChild is TestHeavyInsideHeavy's child (it does nothing on its own).
func TestHeavyChild(t *testing.T) {
	lock := os.Getenv("LAUNCHERTEST_HEAVY_CHILD")
	if lock == "" {
		return
	}
	heavyLock = func() string { return lock }
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.Run("heavy", func(t *testing.T) { Heavy(t) })
	}()
	Done(t, "Heavy under a heavy parent", done)
}

// TestDefaultSignals: a test binary started with SIGHUP and SIGINT ignored (`nohup make test`, `make test &` in a
// script) gives them back their default action before any test runs, for itself and for what it starts: the
// signal tests of tpurun, which keeps an ignored signal ignored, failed under nohup (four tests, "SIGHUP is not
// caught").
func TestDefaultSignals(t *testing.T) {
	if os.Getenv("LAUNCHERTEST_SIGNALS_CHILD") != "" {
		for _, s := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT} {
			if signal.Ignored(s) {
				t.Errorf("%v still ignored in the test binary", s)
			}
		}
		out, err := exec.Command("/bin/sh", "-c", "grep SigIgn /proc/self/status").Output()
		if err != nil {
			t.Fatal(err)
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(string(out), "SigIgn:")), 16, 64)
		if err != nil {
			t.Fatalf("%q: %v", out, err)
		}
		if mask&(1<<(syscall.SIGHUP-1)|1<<(syscall.SIGINT-1)) != 0 {
			t.Errorf("a process the test binary starts ignores %#x, want neither SIGHUP nor SIGINT", mask)
		}
		return
	}
	cmd := exec.Command("/bin/sh", "-c", `trap "" HUP INT; exec "$0" -test.run='^TestDefaultSignals$' -test.v`, os.Args[0])
	cmd.Env = append(os.Environ(), "LAUNCHERTEST_SIGNALS_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "--- PASS: TestDefaultSignals") {
		t.Fatalf("the test binary started with SIGHUP and SIGINT ignored: %v\n%s", err, out)
	}
}

// TestPIDsLeaveOutAReusedPid: a recorded pid that now names another process (its own exited, the number was given
// again) is gone, not alive: a loaded suite wraps pid_max within a minute, and a wait for a fake worker to exit
// waited out its deadline on a stranger with the same pid (TestFaultEveryForwardedSignal/SIGABRT, under two hogs).
func TestPIDsLeaveOutAReusedPid(t *testing.T) {
	dir := FakeDir(t)
	sleep := exec.Command("sleep", "1000")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleep.Process.Kill(); _ = sleep.Wait() })
	pid := sleep.Process.Pid
	write := func(start string) {
		if err := os.WriteFile(filepath.Join(dir, "pids", strconv.Itoa(pid)), []byte(start), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(startTime(pid)) // the process that recorded itself: alive
	if got := PIDs(t, dir); !slices.Equal(got, []int{pid}) {
		t.Fatalf("PIDs = %v, want [%d]", got, pid)
	}
	write("1") // a process that started at tick 1 and whose pid sleep has now: gone
	if got := PIDs(t, dir); len(got) != 0 {
		t.Fatalf("PIDs = %v, want none: pid %d is another process now", got, pid)
	}
	AssertAllGone(t, dir, 1) // returns at once: the recorded process is gone although its pid is alive
}

// TestSweepChildren: what the tests left running (a child, and the child of a child once its parent is killed,
// which comes back to this subreaper) is killed and reaped, and named.
func TestSweepChildren(t *testing.T) {
	if err := SetSubreaper(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", "sleep 1000 & echo $!; exec sleep 1000")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var grandchild int
	if _, err := fmt.Fscan(out, &grandchild); err != nil {
		t.Fatal(err)
	}
	killed := SweepChildren()
	if len(killed) != 2 || !strings.HasPrefix(killed[0], strconv.Itoa(cmd.Process.Pid)+" ") {
		t.Errorf("killed %v, want the child %d, then the grandchild %d", killed, cmd.Process.Pid, grandchild)
	}
	for _, pid := range []int{cmd.Process.Pid, grandchild} {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("pid %d: kill(0) = %v, want gone (killed and reaped)", pid, err)
		}
	}
}

// TestWatchReapsItsOwnAndOnlyThose: watched processes that run are listed as running; once they exit, the one
// that is this process's child is reaped through its pidfd (its pid freed, no zombie left) and the one that is
// another's child (a shell's, which waits for it) is seen to have exited and left to its parent.
func TestWatchReapsItsOwnAndOnlyThose(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	child := exec.Command("/bin/sh", "-c", "read x <&3")
	shell := exec.Command("/bin/sh", "-c", "read x <&3 & echo $!; wait $!; echo reaped")
	child.ExtraFiles, shell.ExtraFiles = []*os.File{r}, []*os.File{r}
	out, err := shell.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	if err := shell.Start(); err != nil {
		t.Fatal(err)
	}
	var grandchild int
	if _, err := fmt.Fscan(out, &grandchild); err != nil {
		t.Fatal(err)
	}
	watched := Watch(t, child.Process.Pid, grandchild)
	if left := watched.Running(); len(left) != 2 {
		t.Fatalf("running %v, want both %d and %d", left, child.Process.Pid, grandchild)
	}
	w.Close() // both reads end
	watched.WaitExited(t, "both to exit", func([]int) string { return "" })
	if err := syscall.Kill(child.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("child %d: kill(0) = %v, want gone (reaped through its pidfd)", child.Process.Pid, err)
	}
	rest, _ := io.ReadAll(out)
	if err := shell.Wait(); err != nil || strings.TrimSpace(string(rest)) != "reaped" {
		t.Errorf("the shell: %v, said %q after the pid; want it to have reaped its own child", err, rest)
	}
}

// TestEndSession: a session leader (a terminal's shell) is killed while its job runs: the job, re-parented to this
// subreaper, is killed and reaped (its pid freed), and named.
func TestEndSession(t *testing.T) {
	if err := SetSubreaper(); err != nil {
		t.Fatal(err)
	}
	sh := exec.Command("/bin/sh", "-c", "sleep 1000 & echo $!; wait")
	sh.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	var job int
	if _, err := fmt.Fscan(out, &job); err != nil {
		t.Fatal(err)
	}
	_ = sh.Process.Kill()
	_ = sh.Wait()
	killed := EndSession(sh.Process.Pid)
	// named sh or sleep: the job may not have exec'd sleep yet
	if len(killed) != 1 || !strings.HasPrefix(killed[0], strconv.Itoa(job)+" (") {
		t.Errorf("killed %v, want the job %d", killed, job)
	}
	if err := syscall.Kill(job, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("job %d: kill(0) = %v, want gone (killed and reaped)", job, err)
	}
}

// TestWriteWholeIsNeverSeenPartial: a record that a reader sees exist it reads whole. Written in place
// (os.WriteFile: create, then write), a reader that saw it exist could read it empty: a grandchild's pid read as
// "" made TestFaultEveryForwardedSignal wait for that grandchild as if it were a worker (3 of 180 runs under load).
func TestWriteWholeIsNeverSeenPartial(t *testing.T) {
	dir := FakeDir(t)
	w := &Worker{Dir: dir}
	const n = 500
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			_ = w.WriteWhole(w.Path("gc", strconv.Itoa(i)), []byte("pid-"+strconv.Itoa(i)))
		}
	}()
	for i := range n {
		p := w.Path("gc", strconv.Itoa(i))
		for {
			if _, err := os.Stat(p); err == nil {
				break
			}
		}
		if b, _ := os.ReadFile(p); string(b) != "pid-"+strconv.Itoa(i) {
			t.Fatalf("record %d read %q once it existed, want it whole", i, b)
		}
	}
	<-done
}
