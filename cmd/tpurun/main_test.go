package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// bin holds the tpurun and hello binaries built once by TestMain.
var bin string

// TestMain either plays a fake worker (FAKE_DIR set) or builds the real binaries and runs the tests. The test
// binary is a child subreaper so that workers orphaned by a SIGKILLed launcher can be reaped and proven gone.
func TestMain(m *testing.M) {
	if os.Getenv("FAKE_DIR") != "" {
		os.Exit(fakeWorker())
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, 36 /* PR_SET_CHILD_SUBREAPER */, 1, 0); errno != 0 {
		fmt.Fprintln(os.Stderr, "prctl(PR_SET_CHILD_SUBREAPER):", errno)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "tpurun-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if p, err := exec.LookPath("go"); err == nil {
		goTool = p
	}
	for _, pkg := range []string{"tpurun/cmd/tpurun", "tpurun/examples/hello"} {
		if out, err := exec.Command(goTool, "build", "-o", dir, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", pkg, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func fakeWorker() int {
	dir, rank := os.Getenv("FAKE_DIR"), os.Getenv("RANK")
	_ = os.WriteFile(filepath.Join(dir, "pids", strconv.Itoa(os.Getpid())), nil, 0o644)
	behaviour := os.Getenv("TPURUN_FAKE")
	if b, ok := os.LookupEnv("TPURUN_FAKE_" + rank); ok {
		behaviour = b
	}
	verb, arg, _ := strings.Cut(behaviour, ":")
	n, _ := strconv.Atoi(arg)
	ready := func() { _ = os.WriteFile(filepath.Join(dir, "ready", rank), nil, 0o644) }
	switch verb {
	case "exit":
		ready()
		fmt.Printf("rank %s exits %d\n", rank, n)
		return n
	case "exitready": // exit n once every rank is ready, so the failure never races the others' setup
		ready()
		world, _ := strconv.Atoi(os.Getenv("WORLD_SIZE"))
		for {
			if es, _ := os.ReadDir(filepath.Join(dir, "ready")); len(es) >= world {
				fmt.Printf("rank %s exits %d\n", rank, n)
				return n
			}
			time.Sleep(5 * time.Millisecond)
		}
	case "hang":
		ready()
		select {}
	case "onterm":
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		ready()
		<-c
		fmt.Println("got SIGTERM")
		return n
	}
	return 98
}

type result struct {
	code           int
	stdout, stderr string
}

func fakeDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for _, s := range []string{"pids", "ready"} {
		if err := os.Mkdir(filepath.Join(d, s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// tpurun prepares the real binary with fake workers doing behaviour (extra env appended).
func tpurun(dir string, env []string, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd := exec.Command(filepath.Join(bin, "tpurun"), args...)
	cmd.Env = append(append(os.Environ(), "FAKE_DIR="+dir), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	return cmd, &out, &errb
}

func runCLI(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	cmd, out, errb := tpurun(dir, env, args...)
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return result{cmd.ProcessState.ExitCode(), out.String(), errb.String()}
}

func waitReady(t *testing.T, dir string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if es, _ := os.ReadDir(filepath.Join(dir, "ready")); len(es) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d workers not ready within 10s", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func assertAllGone(t *testing.T, dir string, want int, within time.Duration) {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(dir, "pids"))
	if err != nil || len(es) < want {
		t.Fatalf("%d pids recorded (%v), want %d", len(es), err, want)
	}
	deadline := time.Now().Add(within)
	for _, e := range es {
		pid, _ := strconv.Atoi(e.Name())
		for {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil) // reap orphans re-parented to this subreaper
			if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("worker pid %d still alive %s later", pid, within)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		hint string
	}{
		{nil, "no PROGRAM given"},
		{[]string{"--nprocs", "0", "true"}, "--nprocs"},
		{[]string{"--bogus", "true"}, "unknown flag: --bogus"},
		{[]string{"--redirects", "7", "--", "true"}, "--redirects"},
		{[]string{"--log-format", "xml", "true"}, "--log-format"},
		{[]string{"--grace", "soon", "true"}, "--grace"},
	} {
		r := runCLI(t, t.TempDir(), nil, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.hint) {
			t.Errorf("tpurun %q: exit %d, stderr %q; want 2 and a message naming %q", tc.args, r.code, r.stderr, tc.hint)
		}
	}
}

// TestProgramNotFoundExit127: a PROGRAM that does not exist exits 127 and one that is not executable 126, as in a
// shell, before anything starts; both name the program.
func TestProgramNotFoundExit127(t *testing.T) {
	t.Parallel()
	noexec := filepath.Join(t.TempDir(), "train.sh")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for prog, want := range map[string]int{"/nonexistent/train": 127, "tpurun-no-such-program": 127, noexec: 126} {
		r := runCLI(t, t.TempDir(), nil, "--", prog)
		if r.code != want || !strings.Contains(r.stderr, prog) {
			t.Errorf("tpurun %s: exit %d, stderr %q; want %d naming it", prog, r.code, r.stderr, want)
		}
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	r := runCLI(t, t.TempDir(), nil, "--help")
	for _, want := range []string{"Usage:", "--nprocs", "--local-ranks-filter", "Exit codes:", "124"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Fatalf("--help: exit %d, stdout lacks %q:\n%s", r.code, want, r.stdout)
		}
	}
}

func TestDemoHello(t *testing.T) {
	t.Parallel()
	r := runCLI(t, t.TempDir(), nil, "--nprocs", "4", "--", filepath.Join(bin, "hello"))
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	for i := range 4 {
		if want := fmt.Sprintf("[%d] hello from rank %d of 4", i, i); !strings.Contains(r.stdout, want) {
			t.Fatalf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "PEAK RSS") {
		t.Fatalf("no exit summary on stderr:\n%s", r.stderr)
	}
}

func TestTorchrunSpellingAndExitCode(t *testing.T) {
	t.Parallel()
	dir := fakeDir(t)
	r := runCLI(t, dir, []string{"TPURUN_FAKE=hang", "TPURUN_FAKE_2=exitready:85"},
		"--nproc_per_node", "3", "--log_format", "json", "--", os.Args[0])
	if r.code != 85 {
		t.Fatalf("exit %d, want rank 2's 85\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "[2] rank 2 exits 85") || !strings.Contains(r.stderr, `"level":"error"`) {
		t.Fatalf("stdout %q / stderr %q: want rank 2's prefixed line and json logs", r.stdout, r.stderr)
	}
	assertAllGone(t, dir, 3, 5*time.Second)
}

func TestTimeoutExit124(t *testing.T) {
	t.Parallel()
	dir := fakeDir(t)
	r := runCLI(t, dir, []string{"TPURUN_FAKE=hang"}, "--nprocs", "2", "--timeout", "2s", "--", os.Args[0])
	if r.code != 124 || !strings.Contains(r.stderr, "timeout 2s expired") {
		t.Fatalf("exit %d, want 124\n%s", r.code, r.stderr)
	}
	assertAllGone(t, dir, 2, 5*time.Second)
}

func TestSIGTERMToLauncher(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		behaviour string
		code      int
	}{{"hang", 143}, {"onterm:0", 0}} {
		t.Run(tc.behaviour, func(t *testing.T) {
			t.Parallel()
			dir := fakeDir(t)
			cmd, out, errb := tpurun(dir, []string{"TPURUN_FAKE=" + tc.behaviour}, "--nprocs", "2", "--", os.Args[0])
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitReady(t, dir, 2)
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if got := cmd.ProcessState.ExitCode(); got != tc.code {
				t.Fatalf("exit %d, want %d\n%s", got, tc.code, errb.String())
			}
			if tc.code == 0 && strings.Count(out.String(), "got SIGTERM") != 2 {
				t.Fatalf("workers did not all receive SIGTERM:\n%s", out.String())
			}
			if tc.code == 143 && strings.Count(errb.String(), "SIGTERM") < 2 {
				t.Fatalf("summary does not show the workers killed by SIGTERM:\n%s", errb.String())
			}
			assertAllGone(t, dir, 2, 5*time.Second)
		})
	}
}

func TestSIGKILLedLauncherLeavesNoWorker(t *testing.T) {
	t.Parallel()
	dir := fakeDir(t)
	cmd, _, _ := tpurun(dir, []string{"TPURUN_FAKE=hang"}, "--nprocs", "4", "--", os.Args[0])
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitReady(t, dir, 4)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	assertAllGone(t, dir, 4, time.Second)
}
