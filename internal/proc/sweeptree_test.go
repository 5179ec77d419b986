package proc_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"tpurun/internal/proc"
	"tpurun/internal/testutil"
)

// treeFake plays the subtree sweep's processes in re-executed test binaries, so that the subreaper bit, the
// wait4(-1) loop and the SIGKILL of every descendant never touch the children of the other tests:
//   - tree-main: subreaper + reaper; starts a tree-worker carrying TPURUN_RUN_ID, checks that the sweep by
//     environment misses the escapee and its leaf, then that Reaper.Sweep kills exactly those two.
//   - tree-worker: starts a tree-escapee in a new session without any TPURUN_* variable, prints
//     "escapee PID" and hangs.
//   - tree-escapee: starts a tree-leaf, prints "leaf PID" and hangs ignoring SIGTERM.
//   - tree-leaf: hangs.
func init() {
	spawns := map[string]string{"tree-main": "tree-worker", "tree-worker": "tree-escapee", "tree-escapee": "tree-leaf"}
	for _, n := range []string{"tree-main", "tree-worker", "tree-escapee", "tree-leaf"} {
		v := testutil.Verb{Name: n, Run: func(*testutil.Worker) int { return treeFake(n) }}
		if s, ok := spawns[n]; ok {
			v.Spawns = []string{s}
		}
		testutil.Define(v)
	}
}

func treeFake(mode string) int {
	self := func(m string, env []string) *exec.Cmd {
		c := exec.Command(testutil.Executable())
		c.Env = append(env, testutil.Self(m))
		c.Stdout, c.Stderr = os.Stdout, os.Stderr
		return c
	}
	env := os.Environ() // FAKE_VERB was removed from it: it named this process's verb
	switch mode {
	case "tree-main":
		if err := treeMain(self("tree-worker", append(env, "TPURUN_RUN_ID=sweep-tree-test"))); err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Println("OK")
		return 0
	case "tree-worker":
		var clean []string
		for _, kv := range env {
			if !strings.HasPrefix(kv, "TPURUN_") {
				clean = append(clean, kv)
			}
		}
		c := self("tree-escapee", clean)
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := c.Start(); err != nil {
			fmt.Println(err)
			return 3
		}
		fmt.Println("escapee", c.Process.Pid)
		select {}
	case "tree-escapee":
		signal.Ignore(syscall.SIGTERM, syscall.SIGHUP)
		c := self("tree-leaf", env)
		if err := c.Start(); err != nil {
			fmt.Println(err)
			return 3
		}
		fmt.Println("leaf", c.Process.Pid)
		select {}
	case "tree-leaf":
		select {}
	}
	return 2
}

func treeMain(worker *exec.Cmd) error {
	if err := proc.SetSubreaper(); err != nil {
		return err
	}
	rp := proc.NewReaper(nil)
	defer rp.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	worker.Stdout = w
	got := make(chan proc.Exit, 1)
	p, err := rp.Start(worker, func(p *proc.Process) { got <- p.Wait() })
	w.Close()
	if err != nil {
		return err
	}
	want := map[string]int{}
	sc := bufio.NewScanner(r)
	for len(want) < 2 && sc.Scan() {
		var name string
		var pid int
		if _, err := fmt.Sscan(sc.Text(), &name, &pid); err != nil {
			return fmt.Errorf("line %q: %w", sc.Text(), err)
		}
		want[name] = pid
	}
	if want["escapee"] == 0 || want["leaf"] == 0 {
		return fmt.Errorf("worker printed %v, want an escapee and a leaf", want)
	}
	// The sweep by environment sees the worker but neither the escapee nor its leaf.
	byEnv, err := proc.FindByEnv("/proc", "TPURUN_RUN_ID", "sweep-tree-test")
	if err != nil {
		return err
	}
	if !slices.Contains(byEnv, p.PID()) || slices.Contains(byEnv, want["escapee"]) || slices.Contains(byEnv, want["leaf"]) {
		return fmt.Errorf("sweep by env found %v; want worker %d and not the escapee %v", byEnv, p.PID(), want)
	}
	// The gentle first step reaches each live descendant once, except the ones skipped (the worker here); no
	// process of the subtree ends from SIGWINCH (ignored by default, also before a child has set up anything).
	hit, err := rp.SignalTree("/proc", func(pid int) bool { return pid == p.PID() }, syscall.SIGWINCH)
	slices.Sort(hit)
	exp := []int{want["escapee"], want["leaf"]}
	slices.Sort(exp)
	if err != nil || !slices.Equal(hit, exp) {
		return fmt.Errorf("SignalTree hit %v (%v), want exactly the escapee and its leaf %v", hit, err, exp)
	}
	if n := rp.LiveDescendants("/proc", nil); n != 3 {
		return fmt.Errorf("%d live descendants, want 3 (worker %d, escapee, leaf) %v", n, p.PID(), want)
	}
	// cleanup: the worker's group first, then the subtree.
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	swept, err := rp.Sweep("/proc")
	if err != nil {
		return fmt.Errorf("Reaper.Sweep: %w", err)
	}
	slices.Sort(swept)
	if !slices.Equal(swept, exp) {
		return fmt.Errorf("swept %v, want exactly the escapee and its leaf %v (the worker is not reported)", swept, exp)
	}
	ex, err := within(got, "the reaper to deliver the worker's exit")
	if err != nil {
		return err
	}
	if ex.Signal != syscall.SIGKILL {
		return fmt.Errorf("worker exit %+v, want SIGKILL", ex)
	}
	err = testutil.Poll(fmt.Sprintf("the swept %v reaped", exp), func() error {
		if proc.Alive(exp[0]) || proc.Alive(exp[1]) || rp.Orphans() < 2 {
			return fmt.Errorf("orphans %d", rp.Orphans())
		}
		return nil
	})
	if err != nil {
		return err
	}
	select {
	case <-rp.Reaped(): // the reaper said so when it reaped the orphans
	default:
		return errors.New("the reaper reaped orphans and Reaped holds no token")
	}
	if n := rp.LiveDescendants("/proc", nil); n != 0 {
		return fmt.Errorf("%d live descendants after the sweep", n)
	}
	// Nothing left below us: a second sweep finds nothing.
	if again, err := rp.Sweep("/proc"); err != nil || len(again) != 0 {
		return fmt.Errorf("second sweep: %v %v, want nothing", again, err)
	}
	return nil
}

func TestReaperSweepKillsEscapeeWithoutEnv(t *testing.T) {
	cmd := testutil.Command("tree-main")
	// Output to a file, not a pipe: if tree-main fails before its sweep, the escapee it leaves holds no pipe that
	// the test would wait on forever.
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	err = cmd.Run()
	out, _ := os.ReadFile(f.Name())
	if err != nil || !strings.Contains(string(out), "OK") {
		t.Fatalf("sweep tree child: %v\n%s", err, out)
	}
}

func TestSweepTreeWithoutChildrenFile(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "42", "task", "42"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := proc.SweepTreeOf(root, 42); !errors.Is(err, proc.ErrNoChildrenFile) {
		t.Fatalf("err %v, want ErrNoChildrenFile", err)
	}
}
