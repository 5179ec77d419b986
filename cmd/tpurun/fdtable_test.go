package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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

// TestStartGrowsTheDescriptorTableOnce: in a start of 128 workers, the workers (the first forked as the last) see
// the launcher's descriptor table (FDSize in /proc/<launcher>/status) at one size or two: the table as it was, and
// one grown in a single step to hold the whole burst (9 descriptors a worker at most), not doubled step by step
// during the burst (in a process of several threads each growth is an RCU grace period during which every
// descriptor the launcher opens past the table's end waits: 30-40 ms on a 16-core host; docs/BENCHMARKS.md, "The
// descriptor table"). Before, ranks saw 256, 512 and 1024 entries.
func TestStartGrowsTheDescriptorTableOnce(t *testing.T) {
	t.Parallel()
	const n = 128
	sizes := fdSizes(t, n, true) // from 64 entries: the growth is needed whatever the test binary has open
	largest := 0
	for size := range sizes {
		largest = max(largest, size)
	}
	want := 9*n + 16
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < uint64(want) {
		want = int(lim.Cur) // tpurun inherits the limit, which caps the reservation
	}
	if len(sizes) > 2 || largest < want {
		t.Fatalf("the workers saw the launcher's table at these sizes (size: the ranks that saw it), want the table as it was "+
			"and at most one grown size, of %d entries at least: %v", want, sizes)
	}
}

// TestEightWorkersKeepTheFirstTable: a start of 8 workers on a host of 16 cores (GOMAXPROCS=16) fits in the 64
// entries a process's descriptor table starts with, and the launcher's table never grows: it did, once, when a
// forking thread per core kept a socket pair open each (12 sockets), a 30-40 ms wait on the 16-core host.
func TestEightWorkersKeepTheFirstTable(t *testing.T) {
	t.Parallel()
	sizes := fdSizes(t, 8, true, "GOMAXPROCS=16")
	if len(sizes) != 1 || len(sizes[64]) != 8 {
		t.Fatalf("the workers saw the launcher's table at these sizes (size: the ranks that saw it), want 64 only: %v", sizes)
	}
}

// TestTableGrowsWhileTheRunIsSetUp: the descriptor table a start of 128 workers needs is grown as soon as the
// command line says how many, while the run is still being set up (here node 0 of two waits for a node that never
// comes), not just before the first fork: the growth's grace period passes during the set-up. tpurun is started
// with a 64-entry table (see fresh); before, its table stayed at 64 entries until the workers started.
func TestTableGrowsWhileTheRunIsSetUp(t *testing.T) {
	t.Parallel()
	ep := testutil.FreeEndpoint(t)
	exe, err := filepath.EvalSymlinks(filepath.Join(bin, "tpurun"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := testutil.Command("fresh", exe, "--device", "cpu", "--nproc-per-node", "128",
		"--nnodes", "2", "--node-rank", "0", "--rdzv-backend", "tcp", "--rdzv-endpoint", ep, "--rdzv-id", "ahead",
		"--rdzv-timeout", neverTimeout, "--", "/bin/true")
	errb := &testutil.Buffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	t.Cleanup(func() { // tpurun first: fresh reaps it and exits
		if pid != 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		} else {
			_ = cmd.Process.Kill()
		}
		_ = cmd.Wait()
	})
	// fresh's child running tpurun, not just its only child: Go's os package first probes clone(CLONE_PIDFD) with a
	// child that exits at once (the test took that one for tpurun 5 times in 120 runs, under load, and waited a
	// minute for the table of a process gone).
	testutil.Eventually(t, "tpurun started by fresh", func() bool {
		for _, k := range testutil.ChildrenOf(cmd.Process.Pid) {
			if running, _ := os.Readlink("/proc/" + strconv.Itoa(k) + "/exe"); running == exe {
				pid = k
			}
		}
		return pid != 0
	})
	testutil.WaitListening(t, ep) // set up as far as the rendezvous, where it waits for node 1
	testutil.WaitFor(t, "tpurun's descriptor table grown for 128 workers while it waits for node 1", func() error {
		if size := testutil.FDTableSize(pid); size < 4*128 {
			return fmt.Errorf("tpurun (pid %d, %s) has a table of %d entries; its stderr:\n%s", pid,
				testutil.ProcState(pid), size, errb.String())
		}
		return nil
	})
	_ = syscall.Kill(pid, syscall.SIGTERM)
	code := testutil.WaitExit(t, cmd)
	pid = 0 // reaped by fresh: its number may be reused
	if code != 143 {
		t.Fatalf("exit %d at SIGTERM, want 143\n%s", code, errb.String())
	}
}
