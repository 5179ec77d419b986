package job_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"tpurun/internal/attempt"
	"tpurun/internal/job"
	"tpurun/internal/spec"
	"tpurun/worker"
)

// TestProcRootIsOneKnob: the /proc that detection reads (TPURUN_PROC_ROOT in the job's environment) is the one the
// orphan sweep reads too. A fake proc tree lists a process the test started as carrying the job's sweep tag, which
// the real /proc does not show: only a sweep of the fake tree signals it.
func TestProcRootIsOneKnob(t *testing.T) {
	bystander := exec.Command("/bin/sleep", "60")
	if err := bystander.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bystander.Process.Kill() })
	root := t.TempDir()
	dir := filepath.Join(root, strconv.Itoa(bystander.Process.Pid))
	waited := make(chan error, 1)
	go func() {
		err := bystander.Wait()
		_ = os.RemoveAll(dir) // gone from the fake /proc too, as from the real one
		waited <- err
	}()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	environ := []byte(worker.EnvSweepTag + "=one-knob-tag\x00")
	if err := os.WriteFile(filepath.Join(dir, "environ"), environ, 0o644); err != nil {
		t.Fatal(err)
	}
	s := spec.Spec{
		Options: attempt.Options{
			Program:  []string{"/bin/true"},
			Env:      append(os.Environ(), "TPURUN_PROC_ROOT="+root),
			SweepTag: "one-knob-tag",
		},
	}
	s.Detect.Device = "cpu"
	s.Request.NProcs = 1
	if _, err := job.Run(context.Background(), s); err != nil {
		t.Fatalf("run: %v", err)
	}
	select {
	case <-waited:
		ws, ok := bystander.ProcessState.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() {
			t.Errorf("the process the fake /proc lists ended with %v, want a signal from the sweep", bystander.ProcessState)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("the sweep did not signal the process the fake /proc (TPURUN_PROC_ROOT) lists: it read another /proc")
	}
}
