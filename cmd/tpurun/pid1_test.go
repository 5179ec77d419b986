package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tpurun/internal/testutil"
	"tpurun/internal/testutil/dockertest"
)

// This file's verbs:
//   - orphaner: start a shortorphan process, which starts a short-lived grandchild and exits at once, so the
//     grandchild is orphaned to PID 1 (tpurun); then poll /proc until the grandchild is reaped (exit 0), or exit
//     3 if it stays a zombie until the deadline.
//   - shortorphan: start a "short" grandchild, print its pid, exit without waiting.
//   - short:PID: exit 0 as soon as its parent, PID, is gone (it is an orphan then).
//   - announce:N: ignore signal N (unless 0), print "ready" and wait for a signal (SIGKILL at least).
func init() {
	testutil.Define(testutil.Verb{Name: "orphaner", Run: orphaner, Spawns: []string{"shortorphan"}})
	testutil.Define(testutil.Verb{Name: "shortorphan", Run: func(w *testutil.Worker) int {
		c := w.Child("short:" + strconv.Itoa(os.Getpid()))
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 4
		}
		fmt.Println(c.Process.Pid)
		return 0
	}, Spawns: []string{"short"}})
	testutil.Define(testutil.Verb{Name: "short", Run: func(w *testutil.Worker) int {
		_ = testutil.Poll("the parent to exit", func() error {
			if os.Getppid() == w.N {
				return errors.New("still there")
			}
			return nil
		})
		return 0
	}})
	testutil.Define(testutil.Verb{Name: "announce", Run: func(w *testutil.Worker) int {
		if w.N != 0 {
			signal.Ignore(syscall.Signal(w.N))
		}
		fmt.Println("ready")
		select {}
	}})
}

func orphaner(w *testutil.Worker) int {
	out, err := w.Child("shortorphan").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "shortorphan:", err)
		return 4
	}
	gpid := strings.TrimSpace(string(out))
	var st []byte
	err = testutil.Poll("the orphan "+gpid+" reaped", func() error {
		st, err = os.ReadFile("/proc/" + gpid + "/stat")
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("%s", st)
	})
	if err != nil {
		fmt.Printf("orphan %s not reaped: %v\n", gpid, err)
		return 3
	}
	fmt.Printf("orphan %s reaped (uid %d)\n", gpid, os.Getuid())
	return 0
}

// runAs is the user and group tpurun runs as in its PID namespace; nil: as the test runs (root).
type runAs struct{ uid, gid int }

// inNewPIDNamespace prepares tpurun as PID 1 of a new PID namespace with its own /proc, its workers doing verb.
// With as, tpurun runs as that user and group with no supplementary group and no capability, as a container
// runtime starts an image's USER: unshare sets them after it has mounted the namespace's /proc, right before it
// execs tpurun (--setuid, --setgid; a Credential on unshare itself would take away the privilege it needs to make
// the namespace). tpurun and the workers (this test binary) are then run from copies that user can read.
func inNewPIDNamespace(t *testing.T, as *runAs, verb string, args ...string) *exec.Cmd {
	t.Helper()
	env := append(os.Environ(), testutil.Fake(verb)) // the verb is used, even where the test is skipped
	unshare := testutil.Need(t, "unshare")           // util-linux
	testutil.Need(t, "root")                         // unshare --pid
	tpurun, worker := filepath.Join(bin, "tpurun"), os.Args[0]
	full := []string{"--pid", "--fork", "--mount-proc"}
	if as != nil {
		tpurun, worker = copiesFor(t, tpurun, worker)
		full = append(full, "--setuid", strconv.Itoa(as.uid), "--setgid", strconv.Itoa(as.gid))
	}
	full = append(append(append(full, tpurun), args...), "--", worker)
	cmd := exec.Command(unshare, full...)
	cmd.Env = env
	return cmd
}

// copiesFor copies the files to a directory that any user can read (the test's own are private to root), and
// returns their copies' paths.
func copiesFor(t *testing.T, files ...string) (string, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "tpurun-pid1-")
	mustDo(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	mustDo(t, os.Chmod(dir, 0o755))
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		mustDo(t, err)
		dst := filepath.Join(dir, filepath.Base(f))
		mustDo(t, os.WriteFile(dst, b, 0o755))
		out = append(out, dst)
	}
	return out[0], out[1]
}

// dockerfileImage is what examples/Dockerfile's runtime stage runs: its ENTRYPOINT (exec form, tpurun) and USER.
func dockerfileImage(t *testing.T) ([]string, *runAs) {
	t.Helper()
	df, err := dockertest.ParseFile(filepath.Join("..", "..", "examples", "Dockerfile"))
	mustDo(t, err)
	entry, err := df.Final().Entrypoint()
	mustDo(t, err)
	if entry[0] != "tpurun" {
		t.Fatalf("examples/Dockerfile's ENTRYPOINT is %q, want tpurun in exec form", entry)
	}
	uid, gid, err := df.Final().User()
	mustDo(t, err)
	return entry, &runAs{uid, gid}
}

// checkCredentials fails unless pid runs as the user and group of as, without a supplementary group.
func checkCredentials(t *testing.T, pid int, as *runAs) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	mustDo(t, err)
	want := map[string]string{"Uid": strings.Repeat(" "+strconv.Itoa(as.uid), 4), "Gid": strings.Repeat(" "+strconv.Itoa(as.gid), 4), "Groups": ""}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		if w, got := want[k], strings.Join(strings.Fields(v), " "); w != "" || k == "Groups" {
			if got != strings.TrimSpace(w) {
				t.Errorf("PID 1 (pid %d here) has %s %q, want %q", pid, k, got, strings.TrimSpace(w))
			}
		}
	}
}

// As PID 1, tpurun reaps the orphans its workers leave: the worker itself sees its orphaned grandchild vanish
// from /proc instead of staying a zombie.
func TestPID1ReapsOrphanedGrandchildren(t *testing.T) {
	cmd := inNewPIDNamespace(t, nil, "orphaner", "--nprocs", "2", "--device", "cpu", "--grace", "2s")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if code := testutil.WaitExit(t, cmd); code != 0 {
		t.Fatalf("tpurun as PID 1: exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	if n := strings.Count(out.String(), "reaped"); n != 2 {
		t.Fatalf("%d workers saw their orphan reaped, want 2\nstdout:\n%s\nstderr:\n%s", n, out.String(), errb.String())
	}
}

// SIGTERM to PID 1 is forwarded to the worker groups (a PID 1 without a handler would ignore it), the run ends
// with the workers' 128+15, and unshare reports that code.
func TestPID1SIGTERMEndsRunWithWorkerCode(t *testing.T) {
	stderr, _ := stopPID1(t, nil, 143, "announce:0", "--nprocs", "2", "--device", "cpu", "--grace", "5s")
	if !strings.Contains(stderr, "SIGTERM") {
		t.Fatalf("no summary naming SIGTERM in stderr:\n%s", stderr)
	}
}

// TestDockerfileFitsDockerStop: `docker stop` sends SIGTERM to PID 1 and SIGKILLs the container 10 s later (its
// default --stop-timeout). examples/Dockerfile's ENTRYPOINT, run as PID 1 as the image's USER (not root) with
// workers that ignore SIGTERM, must have forwarded it, SIGKILLed them, swept and exited (143: stopped by SIGTERM)
// before that, or the container dies uncleanly with 137 and no summary.
func TestDockerfileFitsDockerStop(t *testing.T) {
	const dockerStopTimeout = 10 * time.Second
	entry, as := dockerfileImage(t)
	args := append(entry[1:], "--nprocs", "2", "--device", "cpu")
	stderr, took := stopPID1(t, as, 143, "announce:15", args...) // stopped by SIGTERM, whatever the workers then do
	if took >= dockerStopTimeout {
		t.Fatalf("tpurun %q took %v after SIGTERM, past docker stop's %v: the container would be SIGKILLed\n%s",
			entry[1:], took.Round(time.Millisecond), dockerStopTimeout, stderr)
	}
	if !strings.Contains(stderr, "SIGKILL") {
		t.Fatalf("workers ignoring SIGTERM were not SIGKILLed after the grace period; stderr:\n%s", stderr)
	}
}

// stopPID1 runs tpurun as PID 1 of a new PID namespace (as as, when given) with two workers doing verb, sends it
// SIGTERM once both are ready, and requires exit code want. It returns tpurun's stderr and how long it took after
// SIGTERM.
func stopPID1(t *testing.T, as *runAs, want int, verb string, args ...string) (string, time.Duration) {
	t.Helper()
	cmd := inNewPIDNamespace(t, as, verb, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb testutil.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	for ready := 0; ready < 2; {
		if !sc.Scan() {
			t.Fatalf("workers never got ready; stderr:\n%s", errb.String())
		}
		if strings.Contains(sc.Text(), "ready") {
			ready++
		}
	}
	go func() { // keep draining so the workers never block on a full pipe
		for sc.Scan() {
		}
	}()
	pid1 := childOf(t, cmd.Process.Pid)
	if as != nil {
		checkCredentials(t, pid1, as)
	}
	sent := time.Now()
	if err := syscall.Kill(pid1, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := testutil.WaitExit(t, cmd)
	took := time.Since(sent)
	if code != want {
		t.Fatalf("unshare ended with exit %d, want %d\nstderr:\n%s", code, want, errb.String())
	}
	return errb.String(), took
}

// childOf is the pid of the only child of pid (unshare --fork's child: tpurun, PID 1 inside).
func childOf(t *testing.T, pid int) int {
	t.Helper()
	child := 0
	testutil.WaitFor(t, fmt.Sprintf("unshare (pid %d) to have exactly one child", pid), func() error {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		f := strings.Fields(string(b))
		if len(f) != 1 {
			return fmt.Errorf("children %q", b)
		}
		var err error
		child, err = strconv.Atoi(f[0])
		return err
	})
	return child
}

// TestDockerfileEntrypointReapsAsItsUser: examples/Dockerfile's ENTRYPOINT, PID 1 as the image's USER, reaps the
// orphans its workers leave (PID 1 of a namespace needs no privilege for that), and its workers run as that user.
func TestDockerfileEntrypointReapsAsItsUser(t *testing.T) {
	entry, as := dockerfileImage(t)
	cmd := inNewPIDNamespace(t, as, "orphaner", append(entry[1:], "--nprocs", "2", "--device", "cpu")...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if code := testutil.WaitExit(t, cmd); code != 0 {
		t.Fatalf("tpurun as PID 1, user %d: exit %d\nstdout:\n%s\nstderr:\n%s", as.uid, code, out.String(), errb.String())
	}
	if n := strings.Count(out.String(), fmt.Sprintf("reaped (uid %d)", as.uid)); n != 2 {
		t.Fatalf("%d workers of user %d saw their orphan reaped, want 2\nstdout:\n%s\nstderr:\n%s", n, as.uid, out.String(), errb.String())
	}
}

// With --subreaper (no PID namespace), orphans below tpurun are reparented to it and reaped; without it they would
// go to this test binary (itself a subreaper that never reaps them) and stay zombies.
func TestSubreaperFlagReapsOrphans(t *testing.T) {
	r := runCLI(t, "", []string{testutil.Fake("orphaner")}, "--subreaper", "--nprocs", "2", "--device", "cpu", "--", os.Args[0])
	if r.code != 0 || strings.Count(r.stdout, "reaped") != 2 {
		t.Fatalf("exit %d, want 0 and two reaped orphans\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}
