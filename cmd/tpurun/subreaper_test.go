package main

// tpurun is the child subreaper by default, so the orphan sweep walks its own subtree: a grandchild that left
// its worker's group and session and dropped every TPURUN_* variable is still killed. --no-subreaper falls back
// to the sweep by environment, which kills an escaped grandchild only while it still carries the run id.

import (
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"tpurun/internal/testutil"
)

// This file's verbs (the escapee is started by FAKE_VERB, a name it keeps when it sheds every TPURUN_* variable):
//   - escaper:K (a worker): start an escapee in a new session, with every TPURUN_* variable dropped unless K is
//     1, wait until it recorded its pid under FAKE_DIR/gc, print the pid and exit 0.
//   - escapee: record the pid, ignore SIGTERM/SIGINT/SIGHUP, and answer SIGUSR1 by writing FAKE_DIR/gc/alive-PID.
//   - whoreaps (a worker): start an orphanhang process, which starts a hanging grandchild and exits; wait until
//     the grandchild is re-parented, print "orphan GPID parent PPID launcher LPID" and exit 0.
//   - orphanhang: start a hanging grandchild, print its pid, exit without waiting.
func init() {
	testutil.Define(testutil.Verb{Name: "escaper", Run: escaper, Spawns: []string{"escapee"}})
	testutil.Define(testutil.Verb{Name: "escapee", Run: escapee})
	testutil.Define(testutil.Verb{Name: "whoreaps", Run: whoReaps, Spawns: []string{"orphanhang"}})
	testutil.Define(testutil.Verb{Name: "orphanhang", Run: func(w *testutil.Worker) int {
		c := w.Child("hang")
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 4
		}
		fmt.Println(c.Process.Pid)
		return 0
	}, Spawns: []string{"hang"}})
}

func escaper(w *testutil.Worker) int {
	var drop []string
	if w.N != 1 {
		drop = append(drop, "TPURUN_")
	}
	c := w.Child("escapee", drop...)
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "start escapee:", err)
		return 4
	}
	rec := w.Path("gc", strconv.Itoa(c.Process.Pid))
	if err := testutil.Poll("the escapee's pid record", func() error { _, err := os.Stat(rec); return err }); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	fmt.Println(c.Process.Pid)
	return 0
}

func escapee(w *testutil.Worker) int {
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	pid := strconv.Itoa(os.Getpid())
	if err := os.WriteFile(w.Path("gc", pid), nil, 0o644); err != nil {
		return 4
	}
	for range usr1 {
		_ = os.WriteFile(w.Path("gc", "alive-"+pid), nil, 0o644)
	}
	return 0
}

func whoReaps(w *testutil.Worker) int {
	mid := w.Child("orphanhang")
	out, err := mid.Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "orphanhang:", err)
		return 4
	}
	gpid := strings.TrimSpace(string(out))
	ppid := 0
	err = testutil.Poll("the orphan "+gpid+" re-parented", func() error {
		if ppid = statPPID(gpid); ppid > 0 && ppid != mid.Process.Pid {
			return nil
		}
		return fmt.Errorf("ppid %d", ppid)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	fmt.Printf("orphan %s parent %d launcher %d\n", gpid, ppid, os.Getppid())
	return 0
}

// statPPID is the parent pid in /proc/<pid>/stat, 0 when unreadable.
func statPPID(pid string) int {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// TestSubreaperSweepsEscapedGrandchild: a worker's grandchild in its own session, with every TPURUN_* variable
// dropped, is killed at cleanup by the subtree sweep (the default, and --subreaper); with --no-subreaper the sweep
// by environment kills it only while it keeps the run id, and misses it otherwise (the documented limit).
func TestSubreaperSweepsEscapedGrandchild(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		args    []string
		keepEnv bool
		killed  bool
	}{
		{"default", nil, false, true},
		{"subreaper-flag", []string{"--subreaper"}, false, true},
		{"no-subreaper-env-kept", []string{"--no-subreaper"}, true, true},
		{"no-subreaper-env-dropped", []string{"--no-subreaper"}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := testutil.FakeDir(t)
			env := []string{testutil.Fake("escaper:0")}
			if tc.keepEnv {
				env = []string{testutil.Fake("escaper:1")}
			}
			args := append(append([]string{"--nprocs", "1", "--device", "cpu"}, tc.args...), "--", os.Args[0])
			r := runCLI(t, dir, env, args...)
			if r.code != 0 {
				t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			pid, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(r.stdout), "[0] ")) // rank 0's prefixed line
			if err != nil {
				t.Fatalf("stdout %q: want the escapee's pid", r.stdout)
			}
			if tc.killed {
				testutil.WaitGone(t, pid)
				return
			}
			// Missed: the escapee still answers, so it was never SIGKILLed. Then clean up.
			defer testutil.WaitGone(t, pid)
			defer func() { _ = syscall.Kill(pid, syscall.SIGKILL) }()
			alive := filepath.Join(dir, "gc", "alive-"+strconv.Itoa(pid))
			testutil.WaitFor(t, fmt.Sprintf("the escapee %d to answer SIGUSR1 (if it was swept, it never does)", pid), func() error {
				_ = syscall.Kill(pid, syscall.SIGUSR1)
				_, err := os.Stat(alive)
				return err
			})
		})
	}
}

// TestSubreaperIsTheDefault: the built binary is the child subreaper unless --no-subreaper is given, so an
// orphan below it is re-parented to tpurun, not to this (subreaper) test binary; either way cleanup kills it.
func TestSubreaperIsTheDefault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args       []string
		toLauncher bool
	}{
		{nil, true},
		{[]string{"--subreaper"}, true},
		{[]string{"--no-subreaper"}, false},
	} {
		t.Run(strings.Join(append([]string{"args"}, tc.args...), " "), func(t *testing.T) {
			t.Parallel()
			args := append(append([]string{"--nprocs", "1", "--device", "cpu"}, tc.args...), "--", os.Args[0])
			r := runCLI(t, "", []string{testutil.Fake("whoreaps")}, args...)
			var gpid, parent, launcher int
			if _, err := fmt.Sscanf(r.stdout, "[0] orphan %d parent %d launcher %d", &gpid, &parent, &launcher); err != nil || r.code != 0 {
				t.Fatalf("exit %d, stdout %q (%v)\nstderr:\n%s", r.code, r.stdout, err, r.stderr)
			}
			want := launcher
			if !tc.toLauncher {
				want = os.Getpid()
			}
			if parent != want {
				t.Fatalf("orphan %d re-parented to %d, want %d (launcher %d, test binary %d)", gpid, parent, want, launcher, os.Getpid())
			}
			testutil.WaitGone(t, gpid)
		})
	}
}
