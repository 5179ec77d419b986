package job_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"tpurun/internal/attempt"
	"tpurun/internal/job"
	"tpurun/internal/spec"
	"tpurun/internal/testutil"
	"tpurun/worker"
)

// TestSweepReadsItsOwnProc: TPURUN_PROC_ROOT points detection at another /proc (a host's, mounted into a container
// to see who holds a chip); the sweep and the stop read this process's own, where the job's processes are. A fake
// tree under TPURUN_PROC_ROOT lists a bystander as carrying the job's sweep tag: it must live. The worker's own
// orphan (a setsid'd child, out of its group, carrying the tag) must be swept from the real /proc.
func TestSweepReadsItsOwnProc(t *testing.T) {
	const tag = "own-proc-tag"
	bystander := exec.Command("/bin/sleep", "60")
	if err := bystander.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bystander.Process.Kill(); _ = bystander.Wait() })
	root := t.TempDir()
	dir := filepath.Join(root, strconv.Itoa(bystander.Process.Pid))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "environ"), []byte(worker.EnvSweepTag+"="+tag+"\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(t.TempDir(), "orphan")
	s := spec.Spec{
		Options: attempt.Options{
			Program:  []string{"/bin/sh", "-c", "setsid /bin/sleep 60 & echo $! > " + pidFile},
			Env:      append(os.Environ(), "TPURUN_PROC_ROOT="+root),
			SweepTag: tag,
		},
	}
	s.Detect.Device = "cpu"
	s.Request.NProcs = 1
	if _, err := job.Run(context.Background(), s); err != nil {
		t.Fatalf("run: %v", err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !gone(orphan) {
			_ = syscall.Kill(orphan, syscall.SIGKILL)
		}
	})
	testutil.WaitFor(t, "the worker's orphan swept from this process's /proc", func() error {
		if !gone(orphan) {
			return fmt.Errorf("orphan %d outlived the run", orphan)
		}
		return nil
	})
	if gone(bystander.Process.Pid) {
		t.Errorf("the process only the TPURUN_PROC_ROOT tree lists was killed: the sweep read detection's /proc")
	}
}

// gone reports whether pid has exited: no such process, or a zombie its parent has yet to reap.
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	_, after, _ := strings.Cut(string(b), ") ")
	return errors.Is(err, os.ErrNotExist) || strings.HasPrefix(after, "Z")
}
