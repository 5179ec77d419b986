package main

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"tpurun/internal/testutil"
)

// fresh runs its arguments as a child and exits with its code: the child starts with a descriptor table of the
// smallest size, 64 entries, as tpurun started by a container runtime, Ray or a Python program does. Fork sizes the
// copy for the descriptors the parent has open: the test binary may have hundreds, and may have inherited one
// numbered 255 (an interactive bash keeps its terminal there). fresh closes, before it forks, every descriptor it
// inherited (one without close-on-exec: all of its own have it, and exec closed any other).
func init() {
	testutil.Define(testutil.Verb{Name: "fresh", Run: func(w *testutil.Worker) int {
		ents, _ := os.ReadDir("/proc/self/fd")
		for _, e := range ents {
			fd, err := strconv.Atoi(e.Name())
			if err != nil || fd <= 2 {
				continue
			}
			if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
				_ = unix.Close(fd)
			}
		}
		c := exec.Command(w.Args[0], w.Args[1:]...)
		c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
		_ = c.Run()
		if c.ProcessState == nil {
			return 96
		}
		return c.ProcessState.ExitCode()
	}})
}

// reportFDSize is a worker that prints "fdsize N": the size of its parent's (the launcher's) descriptor table.
const reportFDSize = `while read -r k v; do if [ "$k" = FDSize: ]; then echo "fdsize $v"; fi; done < /proc/$PPID/status`

// fdSizes runs n workers that report the launcher's table size, with tpurun started by fresh when fresh is set, and
// returns the sizes they saw, each with the ranks that saw it.
func fdSizes(t *testing.T, n int, fresh bool, env ...string) map[int][]string {
	t.Helper()
	cmd, out, errb := tpurun(t.TempDir(), env, "--nprocs", strconv.Itoa(n), "--", "/bin/sh", "-c", reportFDSize)
	if fresh {
		plain := cmd
		cmd = testutil.Command("fresh", plain.Args...)
		cmd.Env = append(cmd.Env, env...)
		cmd.Stdout, cmd.Stderr = plain.Stdout, plain.Stderr
	}
	if code := testutil.WaitExit(t, cmd); code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	sizes := map[int][]string{}
	seen := 0
	for line := range strings.Lines(out.String()) {
		rank, rest, ok := strings.Cut(line, " fdsize ")
		if !ok {
			continue
		}
		size, err := strconv.Atoi(strings.TrimSpace(rest))
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		sizes[size] = append(sizes[size], rank)
		seen++
	}
	if seen != n {
		t.Fatalf("%d of %d workers reported the launcher's table\n%s", seen, n, errb.String())
	}
	return sizes
}

// TestEightWorkersKeepTheFirstTable: a start of 8 workers on a host of 16 cores (GOMAXPROCS=16) fits in the 64
// entries a process's descriptor table starts with, and the launcher's table never grows: each growth of a table
// that threads share waits for an RCU grace period (30-40 ms on a 16-core host).
func TestEightWorkersKeepTheFirstTable(t *testing.T) {
	t.Parallel()
	sizes := fdSizes(t, 8, true, "GOMAXPROCS=16")
	if len(sizes) != 1 || len(sizes[64]) != 8 {
		t.Fatalf("the workers saw the launcher's table at these sizes (size: the ranks that saw it), want 64 only: %v", sizes)
	}
}
