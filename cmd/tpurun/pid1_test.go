package main

import (
	"bufio"
	"bytes"
	"encoding/json"
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

	"tpurun/launcher/launchertest"
)

// init lets the test binary play the PID-1 tests' processes (TPURUN_PID1_ROLE) before TestMain runs:
//   - orphaner: start a middle process that starts a short-lived grandchild and exits at once, so the grandchild
//     is orphaned to PID 1 (tpurun); then poll /proc until the grandchild is reaped (exit 0) or stays a zombie
//     (exit 3).
//   - middle: start a "short" grandchild, print its pid, exit without waiting.
//   - short: exit 0 after 100ms.
//   - hang: print "ready" and wait for a signal (SIGTERM's default action ends it).
//   - hangignore: ignore SIGTERM, print "ready" and wait for SIGKILL.
func init() {
	role := os.Getenv("TPURUN_PID1_ROLE")
	if role == "" {
		return
	}
	os.Exit(pid1Role(role))
}

func pid1Role(role string) int {
	self := func(r string) *exec.Cmd {
		c := exec.Command(os.Args[0])
		c.Env = append(os.Environ(), "TPURUN_PID1_ROLE="+r)
		return c
	}
	switch role {
	case "short":
		time.Sleep(100 * time.Millisecond)
		return 0
	case "middle":
		c := self("short")
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 4
		}
		fmt.Println(c.Process.Pid)
		return 0
	case "orphaner":
		out, err := self("middle").Output()
		if err != nil {
			fmt.Fprintln(os.Stderr, "middle:", err)
			return 4
		}
		gpid := strings.TrimSpace(string(out))
		deadline := time.Now().Add(10 * time.Second)
		for {
			st, err := os.ReadFile("/proc/" + gpid + "/stat")
			if errors.Is(err, os.ErrNotExist) {
				fmt.Printf("orphan %s reaped\n", gpid)
				return 0
			}
			if time.Now().After(deadline) {
				fmt.Printf("orphan %s not reaped: %s\n", gpid, st)
				return 3
			}
			time.Sleep(10 * time.Millisecond)
		}
	case "hang":
		fmt.Println("ready")
		select {}
	case "hangignore": // a worker whose shutdown outlasts any grace: only SIGKILL ends it
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		select {}
	}
	return 5
}

// inNewPIDNamespace prepares tpurun as PID 1 of a new PID namespace with its own /proc.
func inNewPIDNamespace(t *testing.T, role string, args ...string) *exec.Cmd {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("unshare (util-linux) is needed for the PID-1 tests: %v", err)
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("PID-namespace tests need root (unshare --pid); CI must run them as root")
		}
		t.Skip("SKIPPED, NOT PASSED: PID-namespace tests need root (unshare --pid)")
	}
	full := append([]string{"--pid", "--fork", "--mount-proc", filepath.Join(bin, "tpurun")}, args...)
	full = append(full, "--", os.Args[0])
	cmd := exec.Command(unshare, full...)
	cmd.Env = append(os.Environ(), "TPURUN_PID1_ROLE="+role)
	return cmd
}

// As PID 1, tpurun reaps the orphans its workers leave: the worker itself sees its orphaned grandchild vanish
// from /proc instead of staying a zombie.
func TestPID1ReapsOrphanedGrandchildren(t *testing.T) {
	cmd := inNewPIDNamespace(t, "orphaner", "--nprocs", "2", "--device", "cpu", "--grace", "2s")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		t.Fatalf("tpurun as PID 1: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	if n := strings.Count(out.String(), "reaped"); n != 2 {
		t.Fatalf("%d workers saw their orphan reaped, want 2\nstdout:\n%s\nstderr:\n%s", n, out.String(), errb.String())
	}
}

// SIGTERM to PID 1 is forwarded to the worker groups (a PID 1 without a handler would ignore it), the run ends
// with the workers' 128+15, and unshare reports that code.
func TestPID1SIGTERMEndsRunWithWorkerCode(t *testing.T) {
	stderr, _ := stopPID1(t, 143, "hang", "--nprocs", "2", "--device", "cpu", "--grace", "5s")
	if !strings.Contains(stderr, "SIGTERM") {
		t.Fatalf("no summary naming SIGTERM in stderr:\n%s", stderr)
	}
}

// TestDockerfileFitsDockerStop: `docker stop` sends SIGTERM to PID 1 and SIGKILLs the container 10 s later (its
// default --stop-timeout). examples/Dockerfile's ENTRYPOINT, run as PID 1 with workers that ignore SIGTERM, must
// have SIGKILLed them, swept and exited (143: stopped by SIGTERM) before that, or the container dies uncleanly with
// 137 and no summary.
func TestDockerfileFitsDockerStop(t *testing.T) {
	const dockerStopTimeout = 10 * time.Second
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var entry []string
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "ENTRYPOINT "); ok {
			if err := json.Unmarshal([]byte(rest), &entry); err != nil {
				t.Fatalf("ENTRYPOINT %s is not exec form (a shell would be PID 1): %v", rest, err)
			}
		}
	}
	if len(entry) == 0 || entry[0] != "tpurun" {
		t.Fatalf("examples/Dockerfile's ENTRYPOINT is %q, want tpurun in exec form", entry)
	}
	args := append(entry[1:], "--nprocs", "2", "--device", "cpu")
	stderr, took := stopPID1(t, 143, "hangignore", args...) // stopped by SIGTERM, whatever the workers then do
	if took >= dockerStopTimeout {
		t.Fatalf("tpurun %q took %v after SIGTERM, past docker stop's %v: the container would be SIGKILLed\n%s",
			entry[1:], took.Round(time.Millisecond), dockerStopTimeout, stderr)
	}
	if !strings.Contains(stderr, "SIGKILL") {
		t.Fatalf("workers ignoring SIGTERM were not SIGKILLed after the grace period; stderr:\n%s", stderr)
	}
}

// stopPID1 runs tpurun as PID 1 of a new PID namespace with two workers playing role, sends it SIGTERM once both
// are ready, and requires exit code want within 40 s. It returns tpurun's stderr and how long it took after SIGTERM.
func stopPID1(t *testing.T, want int, role string, args ...string) (string, time.Duration) {
	t.Helper()
	cmd := inNewPIDNamespace(t, role, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb launchertest.SyncBuffer
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
	sent := time.Now()
	if err := syscall.Kill(pid1, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(40 * time.Second):
		t.Fatalf("tpurun as PID 1 did not end within 40s of SIGTERM; stderr:\n%s", errb.String())
	}
	took := time.Since(sent)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != want {
		t.Fatalf("unshare ended with %v, want exit %d\nstderr:\n%s", err, want, errb.String())
	}
	return errb.String(), took
}

// childOf is the pid of the only child of pid (unshare --fork's child: tpurun, PID 1 inside).
func childOf(t *testing.T, pid int) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if f := strings.Fields(string(b)); len(f) == 1 {
			c, err := strconv.Atoi(f[0])
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("unshare (pid %d) has children %q, want exactly one", pid, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With --subreaper (no PID namespace), orphans below tpurun are reparented to it and reaped; without it they would
// go to this test binary (itself a subreaper that never reaps them) and stay zombies.
func TestSubreaperFlagReapsOrphans(t *testing.T) {
	r := runCLI(t, "", []string{"TPURUN_PID1_ROLE=orphaner"}, "--subreaper", "--nprocs", "2", "--device", "cpu", "--", os.Args[0])
	if r.code != 0 || strings.Count(r.stdout, "reaped") != 2 {
		t.Fatalf("exit %d, want 0 and two reaped orphans\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}
